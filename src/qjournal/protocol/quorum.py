"""Quorum math: majority size and the outcome of a call fanned out to 2N+1 nodes.

Why a module of its own: every quorum decision of the writer (new epoch, start
segment, journal a batch, prepare/accept recovery, finalize, read manifests)
asks the same question, "given these answers so far, are we done, and did we
win?". Keeping that question pure (no asyncio, no clock) lets it be tested by
a table and reused by the simulator's checker.

Theory of operation: a :class:`QuorumCall` (``client/quorum_call.py``) feeds
the counts of successes and failures it has seen into :func:`quorum_outcome`
after every response and stops waiting as soon as the answer is not
``PENDING``. A :class:`WaitRule` says how many successes are needed and
whether every node must have answered before the call may return.

Invariants:

1. ``majority(n) = n // 2 + 1``; any two majorities of the same n nodes share
   at least one node (the overlap that makes epochs unique and committed
   edits durable, seed 000 §2.5).
2. An outcome is ``WON`` only when ``successes >= rule.min_successes`` (and,
   for ``wait_for_all`` rules, every node answered).
3. An outcome is ``LOST`` only when the required successes can no longer be
   reached: ``failures > n - rule.min_successes`` (and, for ``wait_for_all``
   rules, every node answered). A call never returns ``LOST`` while a win is
   still possible, nor ``WON`` with fewer successes than required.
4. ``successes + failures == responses <= n``; anything else is an
   :class:`~qjournal.errors.InvariantViolation` (a caller bug).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from qjournal.errors import InvariantViolation

__all__ = ["Outcome", "WaitRule", "majority", "majority_rule", "all_rule", "quorum_outcome",
           "quorum_string"]


class Outcome(enum.Enum):
    """Where a fanned-out call stands."""

    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def majority(n: int) -> int:
    """The smallest number of nodes that is more than half of ``n``.

    Args:
        n: number of nodes (>= 1).

    Returns:
        ``n // 2 + 1``.

    Raises:
        InvariantViolation: ``n < 1``.
    """
    if n < 1:
        raise InvariantViolation(f"a quorum needs at least one node, got n={n}")
    return n // 2 + 1


def quorum_string(n: int) -> str:
    """Hadoop's way of naming a quorum size: ``"2/3"``, ``"3/5"``."""
    return f"{majority(n)}/{n}"


@dataclass(frozen=True, slots=True)
class WaitRule:
    """What a fanned-out call waits for.

    Attributes:
        name: for messages ("majority", "all").
        n: number of nodes called.
        min_successes: successes needed to win.
        wait_for_all: do not return before every node answered (used by calls
            that must report every node's state or error, e.g. ``format``).
    """

    name: str
    n: int
    min_successes: int
    wait_for_all: bool = False

    def __post_init__(self) -> None:
        if self.n < 1 or not 1 <= self.min_successes <= self.n:
            raise InvariantViolation(
                f"bad wait rule {self.name}: n={self.n} min_successes={self.min_successes}")


def majority_rule(n: int) -> WaitRule:
    """Win at a majority of successes; lose once a majority is out of reach."""
    return WaitRule("majority", n, majority(n), False)


def all_rule(n: int) -> WaitRule:
    """Every node must answer and succeed (format, has_some_data)."""
    return WaitRule("all", n, n, True)


def quorum_outcome(successes: int, failures: int, rule: WaitRule) -> Outcome:
    """Decide a fanned-out call from the answers seen so far.

    Args:
        successes: nodes that answered with a result.
        failures: nodes that answered with an error (or timed out individually).
        rule: what the call waits for.

    Returns:
        ``Outcome.WON``, ``Outcome.LOST`` or ``Outcome.PENDING`` (invariants 2, 3).

    Raises:
        InvariantViolation: negative counts or more answers than nodes (invariant 4).
    """
    n = rule.n
    responses = successes + failures
    if successes < 0 or failures < 0 or responses > n:
        raise InvariantViolation(
            f"impossible quorum counts: successes={successes} failures={failures} n={n}")
    everyone = responses == n
    if rule.wait_for_all and not everyone:
        return Outcome.PENDING
    if successes >= rule.min_successes:
        return Outcome.WON
    if failures > n - rule.min_successes or everyone:
        return Outcome.LOST
    return Outcome.PENDING

"""Recovery decisions of the writer: next epoch, which segment, which source.

Why pure: these few comparisons decide whether an acknowledged edit survives a
writer crash. They are the part of HDFS-3077 most worth a table test (STYLE.md
principle 2), and the simulator swaps a deliberately broken version in to
prove its checker catches the difference. Nothing here touches a clock, a
socket or a file.

Theory of operation (seed 000 §2.5, §2.8, §2.9; reference §4.1, §4.5):

* Epoch: a new writer asks a quorum for ``last_promised_epoch`` and proposes
  one more than the largest answer (:func:`next_epoch`). Uniqueness comes from
  the JournalNodes refusing ``epoch <= promise``, not from this function.
* Segment to recover: the largest ``last_segment_txid`` reported by the
  quorum that accepted the new epoch (:func:`segment_to_recover`). Only the
  newest segment can be unfinalized (seed 000 §2.7 invariant 2).
* Source: every ``prepare_recovery`` answer is ranked by
  :func:`compare_recovery_responses` and the best wins
  (:func:`choose_recovery_source`):

  1. an answer with a segment beats one without (rule 1);
  2. a finalized segment beats an in-progress one, whatever its length or
     epochs (rule 2: a finalize means a previous recovery or the writer
     already decided);
  3. between in-progress segments, the higher ``max_seen_epoch =
     max(accepted_in_epoch, last_writer_epoch)`` wins (rule 3b; §2.10.6,
     §2.10.7), then the larger ``end_txid`` (rule 3c).

  Unlike Hadoop, all equally good answers are returned, so the JournalNodes
  can fall back to another source when a download fails (seed 002 §2.3.2.2).

Invariants:

1. Two answers compared must describe the same segment start txid; two
   finalized answers for one start must end at the same txid (seed 000 §2.7
   invariant 3). Either failure is an :class:`InvariantViolation`.
2. The chosen end txid is at least every responder's ``last_committed_txid``
   inside the segment (HDFS-3863, :func:`check_committed_not_lost`); else
   :class:`InvariantViolation`: recovery would discard an acknowledged edit.
3. The result depends only on the answers, never on the order in which they
   arrived: sources are listed in sorted node order.
4. Equally good sources hold the same bytes: one writer epoch writes a txid
   once, and one epoch accepts one value per segment. Tied sources reporting
   different content digests are an :class:`InvariantViolation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol

from qjournal.errors import InvariantViolation, QuorumError
from qjournal.protocol.segment import INVALID_TXID

__all__ = ["RecoveryResponse", "RecoveryDecision", "next_epoch", "segment_to_recover",
           "max_seen_epoch", "compare_recovery_responses", "choose_recovery_source",
           "check_committed_not_lost"]


class _SegmentStateLike(Protocol):
    start_txid: int
    end_txid: int
    in_progress: bool


class RecoveryResponse(Protocol):
    """What this module reads from a ``prepare_recovery`` answer.

    ``qjournal.protocol.messages.PrepareRecoveryResponse`` has these fields;
    any object with them works (tests use small stand-ins).
    """

    segment_state: _SegmentStateLike | None
    accepted_in_epoch: int | None
    last_writer_epoch: int
    last_committed_txid: int | None


@dataclass(frozen=True, slots=True)
class RecoveryDecision:
    """The outcome of source selection.

    Attributes:
        segment_txid: start txid of the segment being recovered.
        state: the chosen segment state (start, end, in_progress), or None when no
            responder has the segment (nothing to recover, seed 000 §2.10.5).
        sources: every node whose answer is as good as the best, sorted.
        reason: "already-finalized", "already-accepted", "longest-log" or "no-segment".
    """

    segment_txid: int
    state: Any
    sources: tuple[str, ...]
    reason: str


def next_epoch(promised_epochs: Iterable[int]) -> int:
    """Proposed epoch for a new writer: one more than the largest promise seen.

    Args:
        promised_epochs: ``last_promised_epoch`` of every node in the quorum.

    Returns:
        ``max(promised_epochs) + 1``.

    Raises:
        QuorumError: no answers (the caller must have a quorum first).
        InvariantViolation: a negative epoch.
    """
    epochs = list(promised_epochs)
    if not epochs:
        raise QuorumError("cannot choose an epoch without any get_journal_state answer")
    for e in epochs:
        if e < 0:
            raise InvariantViolation(f"negative last_promised_epoch {e}")
    return max(epochs) + 1


def segment_to_recover(last_segment_txids: Iterable[int | None]) -> int | None:
    """The start txid of the newest segment any new-epoch responder has.

    Args:
        last_segment_txids: ``last_segment_txid`` of every ``new_epoch`` answer
            (None for a node without a non-empty segment).

    Returns:
        The largest txid, or None when no node has a segment (a fresh journal).
    """
    known = [t for t in last_segment_txids if t is not None and t != INVALID_TXID]
    return max(known) if known else None


def max_seen_epoch(resp: RecoveryResponse) -> int:
    """``max(accepted_in_epoch, last_writer_epoch)`` (seed 000 §2.9 rule 3a)."""
    accepted = resp.accepted_in_epoch if resp.accepted_in_epoch is not None else 0
    return max(accepted, resp.last_writer_epoch)


def compare_recovery_responses(a: RecoveryResponse, b: RecoveryResponse) -> int:
    """Rank two ``prepare_recovery`` answers as recovery sources.

    Args:
        a, b: the answers.

    Returns:
        1 when ``a`` is the better source, -1 when ``b`` is, 0 when equally good.

    Raises:
        InvariantViolation: different segment starts, or two finalized copies of
            one segment with different ends (invariant 1).
    """
    sa, sb = a.segment_state, b.segment_state
    # Rule 1: having the segment beats not having it.
    if sa is None and sb is None:
        return 0
    if sa is None:
        return -1
    if sb is None:
        return 1
    if sa.start_txid != sb.start_txid:
        raise InvariantViolation(
            f"recovery answers for different segments: {sa.start_txid} and {sb.start_txid}")
    # Rule 2: finalized beats in-progress.
    if not sa.in_progress and not sb.in_progress:
        if sa.end_txid != sb.end_txid:
            raise InvariantViolation(
                f"finalized segments starting at txid {sa.start_txid} with different lengths: "
                f"end {sa.end_txid} and end {sb.end_txid}")
        return 0
    if not sa.in_progress:
        return 1
    if not sb.in_progress:
        return -1
    # Rule 3b: the later writer (or accepted proposal) wins; 3c: then the longer log.
    ea, eb = max_seen_epoch(a), max_seen_epoch(b)
    if ea != eb:
        return 1 if ea > eb else -1
    if sa.end_txid != sb.end_txid:
        return 1 if sa.end_txid > sb.end_txid else -1
    return 0


def choose_recovery_source(segment_txid: int,
                           responses: Mapping[str, RecoveryResponse]) -> RecoveryDecision:
    """Pick the recovery source among ``prepare_recovery`` answers of a quorum.

    Args:
        segment_txid: the segment being recovered.
        responses: node name -> answer, for the nodes that answered.

    Returns:
        A :class:`RecoveryDecision` naming the chosen state and *every* node
        that is an equally good source (sorted by node name, invariant 3).

    Raises:
        InvariantViolation: invariant 1 broken by the answers.
    """
    names = sorted(responses)
    best: list[str] = []
    for name in names:
        if not best:
            best = [name]
            continue
        c = compare_recovery_responses(responses[name], responses[best[0]])
        if c > 0:
            best = [name]
        elif c == 0:
            best.append(name)
    if not best or responses[best[0]].segment_state is None:
        return RecoveryDecision(segment_txid, None, (), "no-segment")
    chosen = responses[best[0]]
    state = chosen.segment_state
    if state.start_txid != segment_txid:
        raise InvariantViolation(
            f"asked to recover segment {segment_txid}, a node answered for segment {state.start_txid}")
    if not state.in_progress:
        reason = "already-finalized"
    elif chosen.accepted_in_epoch is not None and chosen.accepted_in_epoch >= chosen.last_writer_epoch:
        reason = "already-accepted"
    else:
        reason = "longest-log"
    # Equally good sources must also agree on the end txid (they do by construction
    # of the comparator, which ties only on equal ends) and on the content digest when
    # they report one (invariant 4).
    digests: dict[int, str] = {}
    for name in best:
        s = responses[name].segment_state
        if s.end_txid != state.end_txid:  # pragma: no cover - guarded by the comparator
            raise InvariantViolation(f"tied recovery sources disagree on the end txid: {best}")
        d = getattr(s, "digest", None)
        if d is not None:
            digests.setdefault(d, name)
    if len(digests) > 1:
        shown = ", ".join(f"{n}: {d:08x}" for d, n in sorted(digests.items(), key=lambda x: x[1]))
        raise InvariantViolation(
            f"segment {segment_txid}: equally good recovery sources ending at txid "
            f"{state.end_txid} hold different contents ({shown})")
    return RecoveryDecision(segment_txid, state, tuple(best), reason)


def check_committed_not_lost(decision: RecoveryDecision,
                             responses: Mapping[str, RecoveryResponse]) -> None:
    """Refuse a recovery that would drop a txid some node saw committed (invariant 2).

    Args:
        decision: the chosen source.
        responses: every ``prepare_recovery`` answer.

    Raises:
        InvariantViolation: "Decided to synchronize log to X but node N had seen
            txid T committed".
    """
    if decision.state is None:
        # Nobody has the segment: no committed txid may lie inside it.
        for name in sorted(responses):
            c = responses[name].last_committed_txid
            if c is not None and c != INVALID_TXID and c >= decision.segment_txid:
                raise InvariantViolation(
                    f"segment {decision.segment_txid} is absent from every responder but node "
                    f"{name} had seen txid {c} committed")
        return
    end = decision.state.end_txid
    for name in sorted(responses):
        c = responses[name].last_committed_txid
        if c is not None and c != INVALID_TXID and c > end:
            raise InvariantViolation(
                f"decided to synchronize segment {decision.segment_txid} to txid {end} but node "
                f"{name} had seen txid {c} committed")

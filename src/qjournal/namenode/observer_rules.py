"""The observer read rule: answer a read now, wait for the journal, or send the client elsewhere.

Why pure: whether an observer may answer a read is the whole of "consistent reads
from an observer" (HDFS-12943). A mistake here is a client that does not see its
own write, or sees the namespace go back in time. The decision is a function of
four numbers, table-tested in ``tests/namenode/test_observer_rules.py``; the
asyncio shell (``state_id.py`` and ``client_protocol.py``) only waits where the
rule says so.

Theory of operation:

* State id. Every client response carries the txid of the namespace state it
  reflects (the *state id*: on the active the last written txid, made durable
  by the read barrier or the write's sync before the answer leaves; on an
  observer the last txid its tailer applied, which is committed). A client
  keeps the highest state id it has seen and sends it with every call.
* Rule 1. A call without a client state id (a client that does not align) is
  answered as it is (what a stale read on a standby gives).
* Rule 2. ``client_state_id <= applied_txid``: answer now. The answer then
  reflects every edit the client has seen, so it is read-your-writes and
  monotonic across NameNodes.
* Rule 3. Otherwise, while the read has waited less than
  ``dfs.namenode.observer.read.wait.ms``: wait until the tailer applies
  ``client_state_id`` (woken by the tailer, never by polling), then decide again.
* Rule 4. Otherwise: refuse with ``ObserverRetryOnActiveError`` (retriable). The
  client tries another observer, then the active, which is never behind.

Invariants:

1. An observer never answers a read whose client state id exceeds its applied txid
   (rules 2 and 4).
2. A read never waits longer than the limit, plus one wake-up: a wait of
   ``0`` ms refuses at once.
"""

from __future__ import annotations

import enum

__all__ = ["ReadDecision", "observer_read_decision"]


class ReadDecision(str, enum.Enum):
    SERVE = "serve"
    WAIT = "wait"
    RETRY_ELSEWHERE = "retry_elsewhere"


def observer_read_decision(client_state_id: int | None, applied_txid: int, waited_ms: int,
                           wait_limit_ms: int) -> ReadDecision:
    """Decide one read on an observer (module docstring, rules 1-4).

    Args:
        client_state_id: the highest state id the client has seen, or None (rule 1).
        applied_txid: the observer's last applied txid.
        waited_ms: how long this read has waited already.
        wait_limit_ms: ``dfs.namenode.observer.read.wait.ms``.

    Returns:
        ``SERVE``, ``WAIT`` (for at most ``wait_limit_ms - waited_ms``) or ``RETRY_ELSEWHERE``.
    """
    if client_state_id is None:
        return ReadDecision.SERVE  # rule 1
    if client_state_id <= applied_txid:
        return ReadDecision.SERVE  # rule 2
    if waited_ms < wait_limit_ms:
        return ReadDecision.WAIT  # rule 3
    return ReadDecision.RETRY_ELSEWHERE  # rule 4

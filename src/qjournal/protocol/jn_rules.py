"""The JournalNode request gate: pure decisions on every epoch-checked call.

Why a module of its own: fencing of an old writer rests entirely on these few
comparisons (seed 000 §2.3, reference §1.1 legend R/W/P). Keeping them pure
(no storage, no clock) lets a table test cover every branch, and lets the
``Journal`` apply a decision in one obvious place: persist the new promise
first, then update the in-memory serial and committed txid.

Theory of operation: the ``Journal`` calls :func:`check_request` (or
:func:`check_write_request` for ``journal``) with its current promise, the
highest IPC serial it has seen in that epoch and its committed txid. The
function either raises the typed error the caller must see or returns a
:class:`RequestDecision` saying what to change. ``new_epoch`` uses
:func:`check_new_epoch` instead (the Paxos promise rule). :func:`validate_jid`
checks a journal id before it becomes a directory name.

Invariants:

1. A request whose epoch is lower than the last promised epoch is rejected
   (:class:`EpochError`), whatever else it carries; nothing is changed.
2. A request whose epoch is higher than the last promised epoch raises the
   promise to that epoch (``adopt_epoch``) and resets the IPC serial: any call
   from a newer writer fences the older one, even if this node missed
   ``new_epoch``. The caller must persist the new promise before replying.
3. Within an epoch the IPC serial strictly increases; a repeated or older
   serial is :class:`JournalOutOfSyncError` (a duplicated or reordered call).
4. The committed txid never goes backwards; a request that tries is a broken
   protocol invariant (:class:`InvariantViolation`).
5. ``new_epoch(e)`` succeeds only if ``e`` is strictly greater than the
   promise; a node never promises the same epoch twice (so two writers cannot
   both win epoch ``e``).
6. A write (``journal``) is accepted only from the epoch of the last writer
   that started a segment here (``last_writer_epoch``). Such a refusal changes
   nothing, not even the promise: only calls that can legitimately carry a
   newer epoch (start, finalize, heartbeat, purge, prepare, accept) raise it.
7. A rejected request changes nothing (all checks run before any decision is
   returned).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qjournal.errors import EpochError, InvalidRequestError, InvariantViolation, JournalOutOfSyncError
from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import INVALID_TXID

__all__ = ["RequestDecision", "check_request", "check_write_request", "check_new_epoch",
           "validate_jid", "MAX_JID_LENGTH"]

#: A journal id becomes a directory name; keep it short and boring.
MAX_JID_LENGTH = 128
_JID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True, slots=True)
class RequestDecision:
    """What an accepted request changes.

    Attributes:
        adopt_epoch: the request's epoch is newer than the promise; the caller
            must durably persist ``last_promised_epoch = epoch`` before replying
            (invariant 2).
        epoch: the request's epoch (the promise after the decision is applied).
        ipc_serial: the new "highest IPC serial seen in this epoch".
        committed_txid: the committed txid after the request (unchanged when
            the request carried none).
        committed_changed: whether ``committed_txid`` differs from before.
    """

    adopt_epoch: bool
    epoch: int
    ipc_serial: int
    committed_txid: int
    committed_changed: bool


def validate_jid(jid: object) -> str:
    """Check a journal id before it names a directory.

    Rules: a non-empty string of at most :data:`MAX_JID_LENGTH` characters
    from ``[A-Za-z0-9_.-]``, not starting with ``.`` or ``-`` (so no ``..``,
    no hidden directory, no path separator).

    Returns:
        The journal id.

    Raises:
        InvalidRequestError: naming the bad id and the rule it breaks.
    """
    if not isinstance(jid, str):
        raise InvalidRequestError(f"journal id must be a string, got {type(jid).__name__}",
                                  jid=repr(jid)[:80])
    if not jid:
        raise InvalidRequestError("journal id is empty", jid=jid)
    if len(jid) > MAX_JID_LENGTH:
        raise InvalidRequestError(
            f"journal id {jid[:40]!r}... is {len(jid)} characters, over the limit of {MAX_JID_LENGTH}",
            jid=jid[:80])
    if "/" in jid or "\\" in jid:
        raise InvalidRequestError(f"journal id {jid!r} contains a path separator", jid=jid)
    if jid.startswith("."):
        raise InvalidRequestError(f"journal id {jid!r} starts with '.'", jid=jid)
    if not _JID_RE.match(jid):
        raise InvalidRequestError(
            f"journal id {jid!r} has characters outside [A-Za-z0-9_.-] or starts with '-'", jid=jid)
    return jid


def check_request(last_promised_epoch: int, current_ipc_serial: int, committed_txid: int,
                  req: RequestInfo) -> RequestDecision:
    """The request gate of every epoch-checked call (legend R, invariants 1-4, 7).

    Args:
        last_promised_epoch: the node's durable promise.
        current_ipc_serial: highest serial seen in that epoch (-1 after an epoch change).
        committed_txid: the node's committed txid (INVALID_TXID when unknown).
        req: the request header.

    Returns:
        The :class:`RequestDecision` to apply.

    Raises:
        EpochError: ``req.epoch < last_promised_epoch``.
        JournalOutOfSyncError: the IPC serial did not increase.
        InvariantViolation: the committed txid would go backwards.
    """
    jid = req.jid
    if req.epoch < last_promised_epoch:
        raise EpochError(
            f"journal {jid}: IPC's epoch {req.epoch} is less than the last promised epoch "
            f"{last_promised_epoch}", jid=jid, epoch=req.epoch, last_promised_epoch=last_promised_epoch)
    adopt = req.epoch > last_promised_epoch
    serial_floor = -1 if adopt else current_ipc_serial
    if req.ipc_serial <= serial_floor:
        raise JournalOutOfSyncError(
            f"journal {jid}: IPC serial {req.ipc_serial} in epoch {req.epoch} is not higher than "
            f"the prior highest IPC serial {serial_floor}",
            jid=jid, epoch=req.epoch, ipc_serial=req.ipc_serial, prior_ipc_serial=serial_floor)
    new_committed = committed_txid
    if req.committed_txid != INVALID_TXID:
        if req.committed_txid < 0:
            raise InvalidRequestError(
                f"journal {jid}: committed txid {req.committed_txid} is negative",
                jid=jid, committed_txid=req.committed_txid)
        if committed_txid != INVALID_TXID and req.committed_txid < committed_txid:
            raise InvariantViolation(
                f"journal {jid}: client in epoch {req.epoch} tried to move the committed txid "
                f"backward from {committed_txid} to {req.committed_txid}")
        new_committed = req.committed_txid
    return RequestDecision(adopt, req.epoch, req.ipc_serial, new_committed,
                           new_committed != committed_txid)


def check_write_request(last_promised_epoch: int, current_ipc_serial: int, committed_txid: int,
                        last_writer_epoch: int, req: RequestInfo) -> RequestDecision:
    """The gate of ``journal`` (legend W): :func:`check_request` plus invariant 6.

    Raises:
        EpochError: ``req.epoch < last_promised_epoch``.
        JournalOutOfSyncError: ``req.epoch != last_writer_epoch`` or the serial did not increase.
        InvariantViolation: the committed txid would go backwards.
    """
    if req.epoch >= last_promised_epoch and req.epoch != last_writer_epoch:
        raise JournalOutOfSyncError(
            f"journal {req.jid}: IPC's epoch {req.epoch} is not the current writer epoch "
            f"{last_writer_epoch}", jid=req.jid, epoch=req.epoch, last_writer_epoch=last_writer_epoch)
    return check_request(last_promised_epoch, current_ipc_serial, committed_txid, req)


def check_new_epoch(jid: str, last_promised_epoch: int, epoch: int) -> None:
    """The promise rule of ``new_epoch`` (legend P, invariant 5).

    Raises:
        InvalidRequestError: negative epoch.
        EpochError: ``epoch <= last_promised_epoch``.
    """
    if epoch < 0:
        raise InvalidRequestError(f"journal {jid}: proposed epoch {epoch} is negative",
                                  jid=jid, epoch=epoch)
    if epoch <= last_promised_epoch:
        raise EpochError(
            f"journal {jid}: Proposed epoch {epoch} <= last promise {last_promised_epoch}",
            jid=jid, epoch=epoch, last_promised_epoch=last_promised_epoch)

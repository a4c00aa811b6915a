"""Tailing over RPC: the committed edits a majority of JournalNodes' edit caches hold.

Why: a tailer (standby or observer NameNode) that re-downloads the in-progress
segment every round moves bytes in proportion to the segment's size.
HDFS-13150 asks each JournalNode for just the edits after the tailer's last
txid (``get_journaled_edits``, served from memory) and is what makes
millisecond tailing cheap. This module holds the rule that turns the answers of
several nodes into the edits the reader may apply, and the input stream that
serves them.

The rule (:func:`choose_journaled_edits`, pure):

* Only answers of at least a majority of the nodes are judged (the caller
  waits for a majority of successes; a node whose cache cannot serve the txid
  answers :class:`~qjournal.errors.CacheMissError` and counts as a failure).
* Each answer holds consecutive txids from the asked one, every one known
  committed by that node (``journalnode/edit_cache.py``). Sort the answers by
  their last txid, highest first; the reader returns txids up to ``N``, the
  last txid of the ``majority``-th answer: the highest txid a majority of the
  answering nodes hold.
* Every answer that covers a txid ``<= N`` must carry the same bytes for it;
  two nodes answering different bytes for a committed txid is a broken
  invariant (:class:`InvariantViolation`), never silently resolved.
* When ``N`` is below the asked txid but some answer reports a committed txid
  at or above it, committed edits exist that a majority's caches cannot serve
  (e.g. nodes that fell behind), and the answer is a miss: the caller streams
  the segments instead, so a lagging majority of caches never stalls a reader.

Why it is safe: each node returns only edits it knows committed, so one answer
alone would be enough; requiring a majority to hold each edit, with equal
bytes, makes a reader's view independent of any single node (a lagging minority
never makes the reader return an edit a majority lacks, and a node with a bug
cannot feed the reader an edit the others do not hold).

Invariants:

1. The records returned have consecutive txids from the asked txid to ``N``;
   each passed its record checksum when decoded.
2. ``N`` is held, with identical bytes, by at least ``majority`` answering nodes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

from qjournal.errors import CacheMissError, InvariantViolation
from qjournal.journalmanager.streams import EditLogInputStream
from qjournal.protocol.messages import JournaledEdits
from qjournal.protocol.segment import (DEFAULT_MAX_RECORD_BYTES, INVALID_TXID, OK, EditRecord, check_stop,
                                       decode_records, record_span, try_decode)
from qjournal.util.tasks import cancel_and_wait

__all__ = ["ChosenEdits", "choose_journaled_edits", "RpcEditLogInputStream"]


@dataclass(frozen=True, slots=True)
class ChosenEdits:
    """The edits a reader may apply: ``records`` hold txids ``first_txid..last_txid``.

    ``full`` says that some answer hit its size limit, i.e. more edits may follow at once.
    """

    first_txid: int
    last_txid: int
    records: bytes
    full: bool

    @property
    def num_txns(self) -> int:
        return self.last_txid - self.first_txid + 1


def choose_journaled_edits(answers: Mapping[str, JournaledEdits], since_txid: int, majority: int,
                           max_txns: int, jid: str) -> ChosenEdits:
    """The edits held by a majority of the answering nodes (module docstring).

    Args:
        answers: node name -> its answer (at least ``majority`` of them).
        since_txid: the txid asked for.
        majority: the journal's majority size.
        max_txns: the ``max_txns`` asked for (to tell a full answer).
        jid: journal id (messages).

    Returns:
        The chosen edits (``last_txid = since_txid - 1`` when none).

    Raises:
        CacheMissError: fewer than ``majority`` answers, or committed edits exist that a
            majority cannot serve.
        InvariantViolation: an answer does not start at ``since_txid``, or two answers hold
            different bytes for a txid both report committed.
    """
    if len(answers) < majority:
        raise CacheMissError(f"journal {jid!r}: {len(answers)} edit cache answers for txid {since_txid}, "
                             f"a majority is {majority}", jid=jid, since_txid=since_txid)
    names = sorted(answers)
    for n in names:
        if answers[n].first_txid != since_txid:
            raise InvariantViolation(f"journal {jid!r}: {n} answered edits from txid "
                                     f"{answers[n].first_txid} when asked from {since_txid}")
    by_last = sorted(names, key=lambda n: (-answers[n].last_txid, n))
    end = answers[by_last[majority - 1]].last_txid
    if end < since_txid:
        committed = max(answers[n].committed_txid for n in names)
        if committed != INVALID_TXID and committed >= since_txid:
            raise CacheMissError(
                f"journal {jid!r}: txid {since_txid} is committed (up to {committed}) but fewer than "
                f"{majority} edit caches hold it", jid=jid, since_txid=since_txid)
        return ChosenEdits(since_txid, since_txid - 1, b"", False)
    holders = [n for n in by_last if answers[n].last_txid >= end]
    chosen: bytes | None = None
    for n in holders:
        a = answers[n]
        if a.last_txid == end:  # the whole answer (its records are checked as they are decoded)
            piece = a.records
        else:
            lo, hi = record_span(a.records, since_txid, since_txid, end)
            piece = a.records[lo:hi]
        if chosen is None:
            chosen = piece
        elif piece != chosen:
            raise InvariantViolation(
                f"journal {jid!r}: {holders[0]} and {n} hold different bytes for committed txids "
                f"{since_txid}-{end}")
    full = any(a.num_txns >= max_txns for a in answers.values())
    return ChosenEdits(since_txid, end, chosen or b"", full)


#: fetch(since_txid) -> the chosen edits from there (a quorum round of get_journaled_edits)
EditsFetcher = Callable[[int], Awaitable[ChosenEdits]]


class RpcEditLogInputStream(EditLogInputStream):
    """Records chosen from the JournalNodes' edit caches, fetching more while answers are full.

    While the records of a full round are read, the next round is already asked for (one round
    ahead, from the txid after the current round's last): a replay of many rounds then waits for
    the JournalNodes only when they are slower than the reader. :meth:`close` cancels it.

    Args:
        jid: journal id (messages).
        first: the first round's chosen edits (already fetched by the caller).
        fetch_more: another round from a txid, used while the previous round was full.
        to_txid: stop after this txid (None: no limit).
    """

    def __init__(self, jid: str, first: ChosenEdits, fetch_more: EditsFetcher,
                 to_txid: int | None = None) -> None:
        self.jid = jid
        self._chosen = first
        self._fetch_more = fetch_more
        self._to_txid = to_txid
        self._from_txid = first.first_txid
        self._next_txid = first.first_txid
        #: byte offset of the next record in the current round's records; None once it is used up
        self._offset: int | None = 0
        #: the next round, asked for while the current one is read
        self._ahead: asyncio.Task | None = None
        self.rounds = 1

    @property
    def first_txid(self) -> int:
        return self._from_txid

    @property
    def last_txid(self) -> int:
        return self._chosen.last_txid

    def _where(self) -> str:
        return f"journal {self.jid!r} edits from txid {self._chosen.first_txid}"

    def _has_more(self, c: ChosenEdits) -> bool:
        """Whether a round after ``c`` is to be asked for."""
        return c.full and c.num_txns > 0 and (self._to_txid is None or c.last_txid < self._to_txid)

    async def read_next(self) -> EditRecord | None:
        """Next record (invariant 1), or None at the end of what a majority holds (see :meth:`read_batch`)."""
        recs = await self.read_batch(1)
        return recs[0] if recs else None

    async def read_batch(self, max_records: int) -> list[EditRecord]:
        """The next records (at most ``max_records``, invariant 1), or ``[]`` at the end of what a
        majority holds.

        Raises:
            CorruptRecordError: a record of an answer fails its checksum (or is torn).
            InvariantViolation: an answer's records do not run from the asked txid to its last.
        """
        while True:
            if self._to_txid is not None and self._next_txid > self._to_txid:
                return []
            c = self._chosen
            if self._offset is not None:
                if self._ahead is None and self._has_more(c):
                    self._ahead = asyncio.ensure_future(self._fetch_more(c.last_txid + 1))
                left = c.last_txid - self._next_txid + 1
                if left > 0:
                    want = min(max_records, left)
                    if self._to_txid is not None:
                        want = min(want, self._to_txid - self._next_txid + 1)
                    recs, off = decode_records(c.records, self._offset, want, DEFAULT_MAX_RECORD_BYTES,
                                               self._next_txid)
                    if recs:
                        self._offset = off
                        self._next_txid += len(recs)
                        return recs
                    d = try_decode(c.records, off)
                    if d.status == OK:
                        raise InvariantViolation(f"{self._where()}: the answer holds txid {d.record.txid} "  # type: ignore[union-attr]
                                                 f"where {self._next_txid} was expected")
                    check_stop(c.records, off, where=self._where(), allow_torn_tail=False)
                    raise InvariantViolation(f"journal {self.jid!r}: edits answer ended at txid "
                                             f"{self._next_txid - 1}, chosen up to {c.last_txid}")
                if self._offset != len(c.records):
                    raise InvariantViolation(f"{self._where()}: the answer holds bytes after its last txid "
                                             f"{c.last_txid}")
                self._offset = None
            if not self._has_more(c):
                return []
            ahead, self._ahead = self._ahead, None
            self._chosen = await ahead if ahead is not None else await self._fetch_more(self._next_txid)
            self.rounds += 1
            self._offset = 0

    async def close(self) -> None:
        self._offset = None
        ahead, self._ahead = self._ahead, None
        await cancel_and_wait(ahead, ignore_errors=True)  # a round nobody will read

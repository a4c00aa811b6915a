"""An in-memory JournalManager with a controllable sync, for edit-log tests (no disk, no timing)."""

from __future__ import annotations

import asyncio

from qjournal.errors import JournalError, JournalOutOfSyncError
from qjournal.journalmanager.streams import EditLogInputStream, EditLogOutputStream, SegmentInfo
from qjournal.journalmanager.base import JournalManager
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.segment import EditRecord


class GateStream(EditLogOutputStream):
    def __init__(self, j: "MemoryJournal", txid: int):
        self.j, self._seg = j, txid
        self._written = txid - 1
        self._marked = txid - 1
        self._synced = txid - 1
        self.buf: list[EditRecord] = []

    segment_txid = property(lambda self: self._seg)
    last_written_txid = property(lambda self: self._written)
    last_synced_txid = property(lambda self: self._synced)

    def write(self, txid, body, opcode=1):
        if txid != self._written + 1:
            raise JournalOutOfSyncError(f"txid {txid}, expected {self._written + 1}")
        self.buf.append(EditRecord(txid, opcode, body))
        self._written = txid

    def write_raw(self, data, first_txid, num_txns):
        raise NotImplementedError

    def set_version(self, v):
        pass

    def mark(self):
        self._marked = self._written

    async def sync(self):
        upto = self._marked
        self.j.sync_calls.append(upto)
        if self.j.gate is not None:
            await self.j.gate.wait()
        if self.j.fail_with is not None:
            raise self.j.fail_with
        self.j.durable[self._seg] = [r for r in self.buf if r.txid <= upto]
        self._synced = upto

    async def close(self):
        self.mark()
        await self.sync()

    async def abort(self):
        pass


class ListInput(EditLogInputStream):
    def __init__(self, recs, first, last):
        self.recs, self._f, self._l = list(recs), first, last

    first_txid = property(lambda self: self._f)
    last_txid = property(lambda self: self._l)

    async def read_next(self):
        return self.recs.pop(0) if self.recs else None


class MemoryJournal(JournalManager):
    uri = "memory://test"

    def __init__(self):
        self.durable: dict[int, list[EditRecord]] = {}
        self.finalized: dict[int, int] = {}
        self.gate: asyncio.Event | None = None
        self.fail_with: BaseException | None = None
        self.sync_calls: list[int] = []
        self.stream: GateStream | None = None
        self.formatted = False

    async def format(self, ns_info: NamespaceInfo, force=False):
        self.formatted = True

    async def is_formatted(self):
        return self.formatted

    async def recover_unfinalized_segments(self):
        for s, recs in sorted(self.durable.items()):
            if s not in self.finalized and recs:
                self.finalized[s] = recs[-1].txid

    async def start_log_segment(self, txid, layout_version=1):
        if self.fail_with is not None:
            raise self.fail_with
        self.stream = GateStream(self, txid)
        self.durable[txid] = []
        return self.stream

    async def finalize_log_segment(self, first, last):
        if self.durable[first][-1].txid != last:
            raise JournalError(f"finalize {first}-{last} but durable ends at {self.durable[first][-1].txid}")
        self.finalized[first] = last

    async def purge_logs_older_than(self, min_txid):
        for s in sorted(self.finalized):
            if self.finalized[s] < min_txid:
                del self.finalized[s]
                del self.durable[s]

    async def get_manifest(self, since_txid=0, in_progress_ok=False):
        out = []
        for s in sorted(self.durable):
            recs = self.durable[s]
            if s in self.finalized:
                out.append(SegmentInfo(s, self.finalized[s], False))
            elif in_progress_ok and recs:
                out.append(SegmentInfo(s, recs[-1].txid, True))
        return [x for x in out if x.end_txid >= since_txid]

    async def open_segment(self, seg, from_txid=None):
        f = from_txid or seg.start_txid
        return ListInput([r for r in self.durable[seg.start_txid] if f <= r.txid <= seg.end_txid],
                         f, seg.end_txid)

    async def open_input(self, from_txid, to_txid=None, in_progress_ok=False):
        recs = []
        for seg in await self.get_manifest(from_txid, in_progress_ok):
            recs += [r for r in self.durable[seg.start_txid]
                     if r.txid >= from_txid and (to_txid is None or r.txid <= to_txid)]
        return ListInput(recs, from_txid, recs[-1].txid if recs else from_txid - 1)

    def all_records(self):
        return [r for s in sorted(self.durable) for r in self.durable[s]]

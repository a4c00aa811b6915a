"""Build JournalNode states directly through the real per-journal core, then check recovery.

Record bodies carry the writer's epoch (``e<epoch>-t<txid>``) so a test can tell whose copy of
a txid survived.
"""

from __future__ import annotations

from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import HEADER_SIZE, OP_DATA, encode_records, iter_records

from .memcluster import JID, NS, MemCluster


def body(epoch: int, txid: int) -> bytes:
    return b"e%d-t%d" % (epoch, txid)


class Core:
    """Drives one running JournalNode's Journal the way a writer of a given epoch would."""

    def __init__(self, c: MemCluster, name: str) -> None:
        self.c, self.name = c, name
        self.serial = 0

    async def run(self, method: str, *args):
        return await self.c.nodes[self.name].service.run(JID, method, *args)

    def req(self, epoch: int) -> RequestInfo:
        self.serial += 1
        return RequestInfo(JID, epoch, self.serial)

    async def segment(self, kind: str, start: int, end: int, epoch: int) -> None:
        j = await self.run("get_journal_state")
        if j.last_promised_epoch < epoch:
            await self.run("new_epoch", NS, epoch)
        await self.run("start_log_segment", self.req(epoch), start, 1)
        if end >= start:
            recs = encode_records([(t, OP_DATA, body(epoch, t)) for t in range(start, end + 1)])
            await self.run("journal", self.req(epoch), start, start, end - start + 1, recs)
        if kind == "fin":
            await self.run("finalize_log_segment", self.req(epoch), start, end)

    async def segments(self):
        m = await self.run("get_edit_log_manifest", 0, True)
        return [(s.start_txid, s.end_txid, s.in_progress) for s in m.segments]

    async def txids(self, start: int) -> dict[int, bytes]:
        def read():
            j = self.c.nodes[self.name].service.journals[JID].journal
            rs = j.open_segment_for_read(start, True)
            with rs.stream as f:
                data = f.read(rs.length)
            return {r.txid: r.body for r in iter_records(data, HEADER_SIZE)}
        return read()


async def build(c: MemCluster, layout: dict[str, list[tuple[str, int, int, int]]]) -> None:
    """``layout``: node name -> [(kind "fin"|"ip", start, end, epoch), ...] in order."""
    for name in c.names:
        core = Core(c, name)
        for seg in layout.get(name, []):
            await core.segment(*seg)


async def check_recovered(c: MemCluster, start: int, end: int, participants: list[str],
                          epochs: dict[int, int] | None = None) -> None:
    """The seed's postconditions: the participants finalized ``start-end``; no finalized copy
    anywhere has another end; every copy of every txid has the same bytes; when ``epochs`` maps
    txids to the writer epoch whose copy must survive, the bytes are that writer's."""
    for name in participants:
        segs = await Core(c, name).segments()
        assert (start, end, False) in segs, f"{name} has {segs}, expected finalized {start}-{end}"
    seen: dict[int, bytes] = {}
    for name in c.names:
        if c.nodes[name] is None:
            continue
        core = Core(c, name)
        for s, e, ip in await core.segments():
            if s == start and not ip:
                assert e == end, f"{name} finalized {s}-{e}, recovery decided {start}-{end}"
            if s == start and not ip:
                for t, b in (await core.txids(s)).items():
                    if t > end:
                        continue
                    assert seen.setdefault(t, b) == b, f"txid {t} differs on {name}"
    for t, e in (epochs or {}).items():
        assert seen.get(t) == body(e, t), f"txid {t}: expected epoch {e}'s bytes, got {seen.get(t)!r}"


async def recover(c: MemCluster):
    q = c.qjm()
    await q.recover_unfinalized_segments()
    return q


async def write_after(q, first: int, n: int = 3) -> None:
    """The new writer can start the next segment and commit into it."""
    s = await q.start_log_segment(first)
    for t in range(first, first + n):
        s.write(t, body(q.epoch, t))
    s.mark()
    await s.sync()
    await q.finalize_log_segment(first, first + n - 1)


async def read_bodies(q, from_txid: int) -> dict[int, bytes]:
    stream = await q.open_input(from_txid)
    return {r.txid: r.body async for r in stream}

"""``setVersion`` on the quorum journal (seed 003 §4-5: records after it use the new version).

In-process JournalNodes on the memory network. Shows: the layout version given to ``start_log_segment`` reaches
every JournalNode (each segment file's header carries it, finalized too, and the segment reads back); setting the
same version again is nothing; a different version in an open segment is refused with an error naming the journal,
the segment and both versions, before anything reaches a JournalNode, and the stream goes on writing; a JournalSet
of a file journal and the quorum journal refuses it as one call (no journal is dropped, and the file journal's
pending header is set back).
"""

from __future__ import annotations

import asyncio
import os

import pytest

from qjournal.errors import JournalError
from qjournal.journalmanager.file import FileJournal
from qjournal.journalmanager.journalset import JournalSet
from qjournal.protocol.segment import HEADER_SIZE, decode_header

from .memcluster import JID, NS, MemCluster
from .test_qjm_memory import body, read_all


def header_versions(c: MemCluster, name_prefix: str) -> list[int]:
    out = []
    for n in c.names:
        d = os.path.join(c.edits_dir(n), JID, "current")
        for f in sorted(os.listdir(d)):
            if f.startswith(name_prefix):
                with open(os.path.join(d, f), "rb") as fh:
                    out.append(decode_header(fh.read(HEADER_SIZE), f))
    return out


def test_the_layout_version_reaches_the_journalnodes_and_a_change_is_refused(tmp_path):
    async def main():
        c = MemCluster(str(tmp_path), 3)
        await c.start()
        try:
            q = c.qjm()
            await q.format(NS)
            await q.recover_unfinalized_segments()
            s = await q.start_log_segment(1, layout_version=7)
            assert header_versions(c, "edits_inprogress_") == [7, 7, 7]
            s.set_version(7)                                   # the same version: nothing to do
            with pytest.raises(JournalError) as e:
                s.set_version(8)
            msg = e.value.message
            assert "journal 'testjournal'" in msg and "segment 1" in msg and "layout version 7" in msg
            assert "start_log_segment(txid, layout_version=8)" in msg
            assert e.value.fields["layout_version"] == 8
            for t in (1, 2, 3):                                # the stream goes on
                s.write(t, body(t))
            s.mark()
            await s.sync()
            await q.finalize_log_segment(1, 3)
            assert header_versions(c, "edits_0") == [7, 7, 7]
            s2 = await q.start_log_segment(4, layout_version=8)   # a new version: a new segment
            s2.write(4, body(4))
            s2.mark()
            await s2.sync()
            await q.finalize_log_segment(4, 4)
            assert sorted(header_versions(c, "edits_0")) == [7, 7, 7, 8, 8, 8]
            r = c.qjm()
            assert await read_all(r) == [(t, body(t)) for t in range(1, 5)]
            await q.close()
            await r.close()
        finally:
            await c.close()

    asyncio.run(main())


def test_a_journal_set_refuses_as_one_call(tmp_path):
    async def main():
        c = MemCluster(str(tmp_path / "jns"), 3)
        await c.start()
        try:
            q = c.qjm()
            local = FileJournal(str(tmp_path / "local"))
            jset = JournalSet([local, q])
            await jset.format(NS)
            await jset.recover_unfinalized_segments()
            s = await jset.start_log_segment(1, layout_version=7)
            with pytest.raises(JournalError, match="does not change it in an open segment"):
                s.set_version(9)
            assert [m.failed for m in jset.members] == [False, False]
            s.write(1, body(1))
            s.mark()
            await s.sync()
            await jset.finalize_log_segment(1, 1)
            with open(os.path.join(str(tmp_path / "local"), "current", "edits_" + "1".zfill(19) + "-" + "1".zfill(19)),
                      "rb") as fh:
                assert decode_header(fh.read(HEADER_SIZE)) == 7   # the file journal's change was set back
            await jset.close()
        finally:
            await c.close()

    asyncio.run(main())

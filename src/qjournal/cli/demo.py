"""``qjournal demo``: an interim end-to-end run of the journal layer (replaced later by the cluster demo).

Why: ``make demo`` must show the system doing its job from the first day. Until
the JournalNodes and NameNodes exist, the demo writes a few thousand edits
through a :class:`~qjournal.journal.journalset.JournalSet` of two
:class:`~qjournal.journal.file.FileJournal` directories in a temporary
directory, rolls segments, breaks one journal for a while (it is dropped and
restored at the next roll), finalizes, and reads everything back through the
set, verifying every txid and every byte.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time

from qjournal.journal.base import NamespaceInfo
from qjournal.journal.file import DiskIO, FileJournal
from qjournal.journal.journalset import JournalSet
from qjournal.util.logs import setup_logging


class _FlakyDisk(DiskIO):
    """Fails every fdatasync while ``broken`` is set (the demo's injected disk fault)."""

    def __init__(self) -> None:
        self.broken = False

    def fdatasync(self, fd: int) -> None:
        if self.broken:
            raise OSError(5, "Input/output error (injected by the demo)")
        super().fdatasync(fd)


def _body(txid: int) -> bytes:
    return hashlib.sha256(str(txid).encode()).digest() + b"edit-%d" % txid


async def run_demo(txns: int, per_segment: int, batch: int, out=print) -> int:
    """Run the demo; returns 0 when every txid read back matches what was written."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qjournal-demo-") as tmp:
        disk_b = _FlakyDisk()
        ja = FileJournal(os.path.join(tmp, "edits-a"))
        jb = FileJournal(os.path.join(tmp, "edits-b"), disk=disk_b)
        jset = JournalSet([ja, jb])
        out(f"demo: journals {ja.uri} and {jb.uri}")
        await jset.format(NamespaceInfo(namespace_id=4242, cluster_id="demo-cluster"))
        await jset.recover_unfinalized_segments()
        out("demo: formatted both journals and took their writer locks")
        txid = 1
        segments = 0
        while txid <= txns:
            start = txid
            stream = await jset.start_log_segment(start)
            restored = [m.name for m in jset.members if m.restored_at_txid == start]
            if restored:
                out(f"demo: segment {start}: restored {', '.join(restored)} (it lacks the txids it missed)")
            end = min(txns, start + per_segment - 1)
            if segments == 1:
                disk_b.broken = True
                out(f"demo: segment {start}: injecting fdatasync failures into {jb.uri}")
            while txid <= end:
                upto = min(end, txid + batch - 1)
                for t in range(txid, upto + 1):
                    stream.write(t, _body(t))
                stream.mark()
                await stream.sync()
                txid = upto + 1
            failed = [m.name for m in jset.failed()]
            await jset.finalize_log_segment(start, end)
            note = f" (failed and skipped: {', '.join(failed)})" if failed else ""
            out(f"demo: wrote and finalized segment {start}-{end}{note}")
            if segments == 1:
                disk_b.broken = False
            segments += 1
        for j in (ja, jb):
            m = await j.get_manifest()
            out(f"demo: {j.uri} holds " + ", ".join(f"{s.start_txid}-{s.end_txid}" for s in m))
        stream = await jset.open_input(1, txns)
        n = 0
        async for rec in stream:
            if rec.txid != n + 1 or rec.body != _body(rec.txid):
                out(f"demo: FAILED: txid {rec.txid} read back wrong (expected txid {n + 1})")
                return 1
            n += 1
        if n != txns:
            out(f"demo: FAILED: read {n} txids, expected {txns}")
            return 1
        out(f"demo: read back txids 1-{txns} through the set (routing around the hole in "
            f"{jb.uri}); every txid and body verified")
        out(f"demo: count_transactions_since(1) = {await jset.count_transactions_since(1)}")
        await jset.close()
    out(f"demo: OK in {time.monotonic() - t0:.2f}s")
    return 0


def register(subparsers) -> None:
    """Add the ``demo`` subcommand."""
    p = subparsers.add_parser("demo", help="write, roll, break, restore and read back a JournalSet of two FileJournals")
    p.add_argument("--txns", type=int, default=5000, help="transactions to write (default 5000)")
    p.add_argument("--segment-txns", type=int, default=1000, help="transactions per segment (default 1000)")
    p.add_argument("--batch", type=int, default=50, help="transactions per sync (default 50)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    if args.txns < 1 or args.segment_txns < 1 or args.batch < 1:
        print("demo: --txns, --segment-txns and --batch must be positive")
        return 2
    setup_logging("demo", "WARNING", json=False)
    return asyncio.run(run_demo(args.txns, args.segment_txns, args.batch))

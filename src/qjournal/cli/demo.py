"""``qjournal demo`` (what ``make demo`` runs): automatic failover of a real local HA cluster, verified.

Why: one command that shows the system doing its job end to end. By default it
runs :func:`qjournal.localcluster.demo.run_demo`: ZooKeeper, three JournalNodes, two
NameNodes and two ZKFCs as real processes, a client workload printing ops/s, a
SIGKILL of the active NameNode, the standby taking over by itself (and how long
it took), the killed node restarted as the new standby, a check that every
acknowledged operation is present on the new active and nothing else, and a
teardown. It fails loudly (exit status 1) on any loss.

``qjournal demo --journal`` runs the earlier, smaller demo of the journal layer
alone (:func:`run_demo` below): a JournalSet of two FileJournals is written,
rolled, broken (one journal dropped and restored at the next roll), finalized
and read back, verifying every txid and byte. It stays because the foundation
tests use it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time

from qjournal.journalmanager.file import DiskIO, FileJournal
from qjournal.journalmanager.journalset import JournalSet
from qjournal.localcluster.demo import run_demo as run_cluster_demo
from qjournal.protocol.messages import NamespaceInfo
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
    p = subparsers.add_parser("demo", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", help="cluster run directory (default: a new temporary directory)")
    p.add_argument("--writers", type=int, default=4, help="concurrent client writers (default 4)")
    p.add_argument("--before-s", type=float, default=4.0, help="workload seconds before the kill (default 4)")
    p.add_argument("--after-s", type=float, default=4.0, help="workload seconds after the takeover (default 4)")
    p.add_argument("--zk-servers", type=int, default=1, choices=[1, 3], help="ZooKeeper ensemble size")
    p.add_argument("--session-timeout-ms", type=int, default=2000, help="ZKFC ZooKeeper session timeout")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs) afterwards")
    p.add_argument("--secure", action="store_true",
                   help="run it on a secure cluster (cluster up --secure: mutual TLS, authorization, ZooKeeper "
                        "TLS and digest ACLs)")
    p.add_argument("--journal", action="store_true",
                   help="run only the small journal-layer demo (JournalSet of two FileJournals)")
    p.add_argument("--txns", type=int, default=5000, help="--journal: transactions to write (default 5000)")
    p.add_argument("--segment-txns", type=int, default=1000,
                   help="--journal: transactions per segment (default 1000)")
    p.add_argument("--batch", type=int, default=50, help="--journal: transactions per sync (default 50)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    if not getattr(args, "journal", False):
        if args.writers < 1:
            print("demo: --writers must be positive")
            return 2
        return asyncio.run(run_cluster_demo(args.run_dir, writers=args.writers, before_s=args.before_s,
                                            after_s=args.after_s, zk_servers=args.zk_servers,
                                            session_timeout_ms=args.session_timeout_ms, keep=args.keep,
                                            secure=args.secure,
                                            out=lambda line: print(line, flush=True)))
    if args.txns < 1 or args.segment_txns < 1 or args.batch < 1:
        print("demo: --txns, --segment-txns and --batch must be positive")
        return 2
    setup_logging("demo", "WARNING", json=False)
    return asyncio.run(run_demo(args.txns, args.segment_txns, args.batch))

"""What serving a segment costs a JournalNode: ``/getJournal`` of a finalized segment, CPU and rate, two trees.

Why: every copy of a finalized segment that leaves a JournalNode (the JournalNodeSyncer of a peer, the Spark
pipeline's executors, accept-recovery, readers) is served by ``/getJournal``. Since issue 29 the body goes from the
file to the socket by ``sendfile`` (the bytes never pass through the process); before, it was read in chunks and
written. This starts one ``qjournal journalnode`` process per tree (``--base-src``: a tree before the change),
writes the same finalized segment of ``--mb`` MB into each, downloads it ``--reps`` times alternating between the
two, and prints the medians of the JournalNode's CPU time per download (from ``/proc``) and the transfer rate.

Run: ``.venv/bin/python bench/getjournal_bench.py --base-src /tmp/base/src --mb 256 --reps 5``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

import aiohttp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.protocol.messages import NamespaceInfo, RequestInfo  # noqa: E402
from qjournal.protocol.protocols import QJOURNAL  # noqa: E402
from qjournal.protocol.segment import OP_DATA, encode_records  # noqa: E402
from qjournal.transport import RpcClient  # noqa: E402
from qjournal.util.proc import qjournal_argv, start_daemon  # noqa: E402

JID = "bench"
NS = NamespaceInfo(7, "bench-cluster")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def fill(rpc: str, mb: int) -> None:
    host, port = rpc.rsplit(":", 1)
    c = await RpcClient.connect_tcp(host, int(port))
    try:
        await c.call(QJOURNAL.format, jid=JID, ns_info=NS.to_wire(), force=False)
        await c.call(QJOURNAL.new_epoch, jid=JID, ns_info=NS.to_wire(), epoch=1)
        serial = iter(range(1, 1 << 30))

        def req() -> dict:
            return RequestInfo(JID, 1, next(serial), -12345).to_wire()
        await c.call(QJOURNAL.start_log_segment, req=req(), txid=1, layout_version=1)
        body = b"e" * 1000
        txid, per = 1, 1000
        while txid * 1000 < mb * (1 << 20):
            await c.call(QJOURNAL.journal, req=req(), segment_txid=1, first_txid=txid, num_txns=per,
                         records=encode_records([(t, OP_DATA, body) for t in range(txid, txid + per)]))
            txid += per
        await c.call(QJOURNAL.finalize_log_segment, req=req(), start_txid=1, end_txid=txid - 1)
    finally:
        await c.close()


async def download(http: str) -> int:
    n = 0
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://{http}/getJournal?jid={JID}&segmentTxId=1") as r:
            assert r.status == 200, r.status
            async for chunk in r.content.iter_chunked(1 << 20):
                n += len(chunk)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", required=True)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    trees = {"before (chunks)": os.path.abspath(args.base_src), "sendfile": os.path.abspath(here)}
    tmp = tempfile.mkdtemp(prefix="qj-getjournal-")
    daemons = {}
    try:
        for i, (name, src) in enumerate(trees.items()):
            env = dict(os.environ, PYTHONPATH=src)
            daemons[name] = start_daemon(f"jn{i}", qjournal_argv(
                "-D", "qjournal.journalnode.fsync=false", "journalnode", "--edits-dir", f"{tmp}/jn{i}",
                "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"), env=env,
                log_path=f"{tmp}/jn{i}.log", ready_timeout_s=60)
            asyncio.run(fill(daemons[name].ready["rpc"], args.mb))
        with open("/proc/loadavg") as f:
            print("load average at start:", " ".join(f.read().split()[:3]))
        got: dict[str, list[tuple[float, float]]] = {n: [] for n in trees}
        for _ in range(args.reps):
            for name, d in daemons.items():
                c0, t0 = cpu_s(d.pid), time.perf_counter()
                n = asyncio.run(download(d.ready["http"]))
                got[name].append((cpu_s(d.pid) - c0, n / (time.perf_counter() - t0) / 1e6))
        with open("/proc/loadavg") as f:
            print("load average at end:", " ".join(f.read().split()[:3]))
        print(f"segment: {n / 1e6:.0f} MB, {args.reps} downloads per tree, medians")
        for name, rows in got.items():
            print(f"{name:<16} JournalNode CPU per download {statistics.median(r[0] for r in rows) * 1000:7.1f} ms   "
                  f"rate {statistics.median(r[1] for r in rows):7.0f} MB/s")
    finally:
        for d in daemons.values():
            d.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

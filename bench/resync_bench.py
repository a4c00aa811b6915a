"""Redundancy benchmark (issue 12): how fast a wiped JournalNode gets its log back, and how fast a paused one
rejoins the quorum.

Why: a JournalNode whose disk was replaced holds nothing until its syncer has copied the retention window from
its peers, and until then the journal lives on a bare majority. This measures, in one run on one machine:

1. floor: the ``/getJournal`` HTTP download of the same segments from a peer, one after the other, into memory
   (what the syncer's transfer cannot beat), and a ``write`` + ``fsync`` of the same bytes to a file (the disk);
2. resync: three ``qjournal journalnode`` processes, two holding ``--gb`` GB of finalized segments, the third
   started on an empty directory with ``dfs.journalnode.enable.sync.format=true``: time from its READY line until
   it holds every segment (its ``/jmx`` ``SyncerBytesSynced``), as MB/s and as a ratio to the download floor;
3. rejoin: a JournalNode paused with SIGSTOP for 5 s during steady writes (the writer's call deadline 1 s, so it
   is marked out of sync), then SIGCONT: time until it acknowledges a batch of the same segment again
   (``--rejoins`` rounds, median and max).

Usage: .venv/bin/python bench/resync_bench.py [--gb 1.0] [--segment-mb 100] [--rejoins 5] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import aiohttp  # noqa: E402

from qjournal.client.qjm import QuorumJournalManager  # noqa: E402
from qjournal.config import Configuration  # noqa: E402
from qjournal.ha.zookeeper import free_ports  # noqa: E402
from qjournal.journalnode.disk_storage import DiskJournalStorage  # noqa: E402
from qjournal.journalnode.journal import Journal  # noqa: E402
from qjournal.protocol.journal_uri import segment_url  # noqa: E402
from qjournal.protocol.messages import NamespaceInfo, RequestInfo  # noqa: E402
from qjournal.protocol.segment import OP_DATA, encode_records  # noqa: E402
from qjournal.util.proc import qjournal_argv, start_daemon  # noqa: E402

NS = NamespaceInfo(4242, "bench")
JID = "resync"
RECORD = 64 * 1024


def build_log(root: str, total_bytes: int, segment_bytes: int) -> tuple[int, int]:
    """Write finalized segments of 64 KiB records into a journal at ``root``; returns (segments, bytes)."""
    j = Journal(JID, DiskJournalStorage(os.path.join(root, JID), fsync=False))
    try:
        j.format(NS)
        j.new_epoch(NS, 1)
        per_seg = max(1, segment_bytes // RECORD)
        body = os.urandom(RECORD)
        txid, serial, written, segs = 1, 0, 0, 0
        while written < total_bytes:
            def req():
                nonlocal serial
                serial += 1
                return RequestInfo(JID, 1, serial, txid - 1)
            j.start_log_segment(req(), txid, 1)
            first = txid
            for k in range(0, per_seg, 64):
                n = min(64, per_seg - k)
                recs = encode_records([(txid + i, OP_DATA, body) for i in range(n)])
                j.journal(req(), first, txid, n, recs)
                txid += n
                written += len(recs)
            j.finalize_log_segment(req(), first, txid - 1)
            segs += 1
        j.heartbeat(RequestInfo(JID, 1, serial + 1, txid - 1))  # every peer knows it all committed
        return segs, written
    finally:
        j.close()


def disk_floor(d: str, nbytes: int) -> float:
    path = os.path.join(d, "floor.bin")
    chunk = os.urandom(8 << 20)
    t0 = time.monotonic()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    dt = time.monotonic() - t0
    os.unlink(path)
    return nbytes / dt / 1e6


def start_jn(name: str, d: str, port: int, uri: str, *extra: str):
    return start_daemon(name, qjournal_argv(
        "-D", f"dfs.namenode.shared.edits.dir={uri}", "-D", "dfs.journalnode.sync.interval=200ms",
        "-D", "qjournal.journalnode.fsync=true", *extra, "journalnode", "--edits-dir", d,
        "--rpc-address", f"127.0.0.1:{port}", "--http-address", "127.0.0.1:0"),
        log_path=d + ".log", ready_timeout_s=120)


async def jmx(http: str) -> dict:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://{http}/jmx?qry=Hadoop:service=JournalNode,name=Journal-{JID}") as r:
            beans = (await r.json())["beans"]
    return beans[0] if beans else {}


async def download_all(http: str, starts: list[int]) -> float:
    """MB/s of fetching every segment once over /getJournal."""
    total = 0
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s:
        for st in starts:
            async with s.get(segment_url(f"http://{http}", JID, st, NS.storage_info, False)) as r:
                assert r.status == 200, await r.text()
                total += len(await r.read())
    return total / (time.monotonic() - t0) / 1e6


async def resync(root: str, gb: float, segment_mb: int) -> dict:
    ports = free_ports(3)
    uri = "qjournal://" + ";".join(f"127.0.0.1:{p}" for p in ports) + f"/{JID}"
    dirs = [os.path.join(root, f"jn{i}") for i in range(3)]
    t0 = time.monotonic()
    segs, nbytes = build_log(dirs[0], int(gb * 1e9), segment_mb << 20)
    shutil.copytree(dirs[0], dirs[1])
    print(f"built {segs} segments, {nbytes / 1e6:.0f} MB of records, in {time.monotonic() - t0:.1f} s")
    floor_disk = disk_floor(root, nbytes)
    daemons = []
    try:
        for i in range(2):
            daemons.append(start_jn(f"jn{i}", dirs[i], ports[i], uri))
        starts = sorted(int(n.split("_")[1].split("-")[0]) for n in os.listdir(os.path.join(dirs[0], JID, "current"))
                        if n.startswith("edits_0"))
        # warm both peers' page caches and digests the same way for both measurements
        floor_http = await download_all(daemons[0].ready["http"], starts)
        floor_http = max(floor_http, await download_all(daemons[0].ready["http"], starts))
        os.makedirs(dirs[2])
        t_start = time.monotonic()
        d2 = start_jn("jn2", dirs[2], ports[2], uri, "-D", "dfs.journalnode.enable.sync.format=true")
        daemons.append(d2)
        total_files = sum(os.path.getsize(os.path.join(dirs[0], JID, "current", n))
                          for n in os.listdir(os.path.join(dirs[0], JID, "current")) if n.startswith("edits_0"))
        while True:
            b = await jmx(d2.ready["http"])
            if b.get("SyncerBytesSynced", 0) >= total_files:
                break
            if time.monotonic() - t_start > 3600:
                raise RuntimeError("resync did not finish in an hour")
            await asyncio.sleep(0.05)
        took = time.monotonic() - t_start
        rate = total_files / took / 1e6
        return {"segments": segs, "bytes": total_files, "seconds": took, "mb_s": rate,
                "http_floor_mb_s": floor_http, "disk_floor_mb_s": floor_disk}
    finally:
        for d in daemons:
            d.kill()


async def rejoin(root: str, rounds: int) -> list[float]:
    ports = free_ports(3)
    uri = "qjournal://" + ";".join(f"127.0.0.1:{p}" for p in ports) + f"/{JID}"
    dirs = [os.path.join(root, f"rj{i}") for i in range(3)]
    daemons = [start_jn(f"rj{i}", dirs[i], ports[i], uri) for i in range(3)]
    conf = Configuration()
    conf.set("dfs.qjournal.write-txns.timeout.ms", "1000")
    q = QuorumJournalManager(uri, conf=conf, ns_info=NS)
    out_times = []
    try:
        await q.format(NS)
        await q.recover_unfinalized_segments()
        out = await q.start_log_segment(1)
        lg = next(x for x in q.loggers.loggers if x.name.endswith(f":{ports[2]}"))
        txid = 0
        loop = asyncio.get_running_loop()

        async def write_for(seconds: float) -> None:
            nonlocal txid
            end = loop.time() + seconds
            while loop.time() < end:
                for _ in range(10):
                    txid += 1
                    out.write(txid, b"x" * 100, OP_DATA)
                out.mark()
                await out.sync()
        for _ in range(rounds):
            await write_for(0.5)
            daemons[2].signal(signal.SIGSTOP)
            await write_for(5.0)
            if not lg.out_of_sync:
                raise RuntimeError("the paused node was not marked out of sync")
            paused_at = txid
            daemons[2].signal(signal.SIGCONT)
            t0 = loop.time()
            while lg.highest_acked_txid <= paused_at:
                if loop.time() - t0 > 60:
                    raise RuntimeError("the resumed node never acknowledged again")
                await write_for(0.005)
            out_times.append(loop.time() - t0)
        await out.close()
        await q.finalize_log_segment(1, txid)
    finally:
        await q.close()
        for d in daemons:
            d.kill()
    return out_times


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the log to resync")
    ap.add_argument("--segment-mb", type=int, default=100)
    ap.add_argument("--rejoins", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to put the JournalNodes (default: a temp dir)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="resync-bench-", dir=a.dir)
    print(f"resync bench: {a.gb} GB in {a.segment_mb} MB segments, dir {root}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f}")
    try:
        r = await resync(root, a.gb, a.segment_mb)
        print(f"floor: /getJournal download {r['http_floor_mb_s']:.0f} MB/s, disk write+fsync "
              f"{r['disk_floor_mb_s']:.0f} MB/s")
        print(f"resync of a wiped JournalNode: {r['segments']} segments, {r['bytes'] / 1e6:.0f} MB in "
              f"{r['seconds']:.1f} s = {r['mb_s']:.0f} MB/s ({r['mb_s'] / r['http_floor_mb_s']:.2f}x the download, "
              f"{r['mb_s'] / r['disk_floor_mb_s']:.2f}x the disk)")
        times = await rejoin(root, a.rejoins)
        print(f"SIGCONT to the first acknowledgement of a paused JournalNode (5 s SIGSTOP, {len(times)} rounds): "
              f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
              f"(out-of-sync heartbeat interval 1000 ms)")
        print(f"load at end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

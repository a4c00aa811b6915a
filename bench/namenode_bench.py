"""NameNode benchmark: ops/s with group commit, standby tail lag, failover time.

Why: group commit is the NameNode's whole performance story (many clients
share one journal sync), and failover time decides how long an HA pair is
unavailable. Every figure is printed beside the physical floor measured in the
same run on the same disk/journal, as a ratio.

What it measures (all on 127.0.0.1, real RPC over TCP, one NameNode process
per role unless said otherwise):

1. Journal floor: the edits journal alone (``--journal file``: a FileJournal
   in a temporary directory; ``--journal qjm``: three JournalNode processes),
   syncs/s with one txn per sync, and txns/s with 1000-txn batches.
2. NameNode ops/s for a mkdir/create/rename mix with 1, 8 and 64 concurrent
   clients (each its own connection), the mean group-commit batch (txns per
   journal sync), and the ratio ops/s : journal syncs/s (1 txn per sync).
3. Standby tail lag (in-process pair over a file:// shared dir, tail period
   100 ms, roll period 1 s): txns the standby is behind while the active
   writes, and time until it has everything once writes stop.
4. Failover: time from ``transition_to_active`` on a standby that has not
   tailed since the last checkpoint (tail period 1 h) to the first accepted
   write, for 1 and 10^5 (``--big``: also 10^6) edits since that checkpoint.

Usage: ``.venv/bin/python bench/namenode_bench.py [--seconds 4] [--journal file|qjm] [--big]``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

from qjournal.config import Configuration
from qjournal.namenode.journal_registry import open_journal
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import DFSClient
from qjournal.namenode.format import format_namenode
from qjournal.namenode.namespace import CallContext
from qjournal.protocol.messages import NamespaceInfo
from qjournal.util.proc import qjournal_argv, start_daemon


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------ journal
class JNs:
    """Three JournalNode processes for ``--journal qjm`` (``src``: run that tree's code, default the
    interpreter's)."""

    def __init__(self, root: str, src: str | None = None) -> None:
        self.daemons = []
        for i in range(3):
            self.daemons.append(start_daemon(
                f"jn{i}", qjournal_argv("-D", "qjournal.log.json=false", "-D", "qjournal.log.level=WARNING",
                                        "journalnode", "--edits-dir", f"{root}/jn{i}",
                                        "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"),
                log_path=f"{root}/jn{i}.log", env={"PYTHONPATH": src} if src else None))

    def uri(self, jid: str) -> str:
        return "qjournal://" + ";".join(d.ready["rpc"] for d in self.daemons) + f"/{jid}"

    def close(self) -> None:
        for d in self.daemons:
            d.stop()


async def journal_floor(uri: str, seconds: float) -> tuple[float, float]:
    """(syncs/s with 1 txn per sync, txns/s with 1000-txn batches) of the bare journal."""
    conf = Configuration()
    j = open_journal(uri, conf)
    ns = NamespaceInfo(1, "CID-bench")
    await j.format(ns, force=True)
    if hasattr(j, "ns_info"):
        j.ns_info = ns
    await j.recover_unfinalized_segments()
    out = await j.start_log_segment(1)
    body = b"x" * 120
    txid = 0
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds / 2:
        txid += 1
        out.write(txid, body)
        out.mark()
        await out.sync()
        n += 1
    syncs_per_s = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    m = 0
    while time.perf_counter() - t0 < seconds / 2:
        for _ in range(1000):
            txid += 1
            out.write(txid, body)
        out.mark()
        await out.sync()
        m += 1000
    batch_txns_per_s = m / (time.perf_counter() - t0)
    await out.close()
    await j.finalize_log_segment(1, txid)
    await j.close()
    return syncs_per_s, batch_txns_per_s


# ------------------------------------------------------------------ NameNode
def nn_conf(root: str, name: str, shared: str | None, **extra: str) -> Configuration:
    c = Configuration()
    c.set("dfs.namenode.name.dir", f"file://{root}/{name}")
    c.set("qjournal.namenode.superuser", "bench")
    c.set("qjournal.log.level", "WARNING")
    c.set("dfs.namenode.checkpoint.check.period", "3600s")
    c.set("dfs.ha.log-roll.period", "0")
    if shared:
        c.set("dfs.namenode.shared.edits.dir", shared)
        c.set("dfs.nameservices", "ns1")
        c.set("dfs.ha.namenodes.ns1", "nn1,nn2")
    for k, v in extra.items():
        c.set(k, v)
    return c


async def ops_per_second(addr: tuple[str, int], clients: int, seconds: float) -> tuple[float, float]:
    """(ops/s, mean txns per journal sync) for a mkdir/create/rename mix against the NameNode at ``addr``."""
    host, port = addr
    cs = [DFSClient(addresses=[("nn", host, port)], user="bench") for _ in range(clients)]
    for i, c in enumerate(cs):
        await c.mkdirs(f"/b{clients}/c{i}")
    before = (await cs[0].call("get_stats"))["editlog"]
    stop = time.perf_counter() + seconds
    counts = [0] * clients

    async def run(i: int, c: DFSClient) -> None:
        k = 0
        base = f"/b{clients}/c{i}"
        while time.perf_counter() < stop:
            r = k % 3
            if r == 0:
                await c.mkdirs(f"{base}/d{k}")
            elif r == 1:
                await c.create(f"{base}/f{k}")
            else:
                await c.rename(f"{base}/f{k - 1}", f"{base}/g{k}")
            k += 1
        counts[i] = k

    t0 = time.perf_counter()
    await asyncio.gather(*(run(i, c) for i, c in enumerate(cs)))
    dt = time.perf_counter() - t0
    after = (await cs[0].call("get_stats"))["editlog"]
    for c in cs:
        await c.close()
    syncs = after["num_syncs"] - before["num_syncs"]
    txns = after["num_txns_synced"] - before["num_txns_synced"]
    return sum(counts) / dt, (txns / syncs if syncs else 0.0)


async def bench_ops(root: str, uri: str | None, seconds: float, floor_syncs: float) -> list[str]:
    """The NameNode runs as its own process (``qjournal namenode``); the clients run here."""
    opts = ["-D", f"dfs.namenode.name.dir=file://{root}/ops", "-D", "qjournal.namenode.superuser=bench",
            "-D", "qjournal.log.json=false", "-D", "qjournal.log.level=WARNING",
            "-D", "dfs.namenode.checkpoint.check.period=3600s"]
    if uri:  # write through the journal under test as the (non-HA) edits dir
        opts += ["-D", f"dfs.namenode.edits.dir={uri}"]
    conf = nn_conf(root, "ops", None)
    if uri:
        conf.set("dfs.namenode.edits.dir", uri)
    await format_namenode(conf, cluster_id="CID-bench", namespace_id=7, format_shared=False)
    d = start_daemon("nn-bench", qjournal_argv(*opts, "namenode", "--rpc-address", "127.0.0.1:0"),
                     log_path=f"{root}/nn-bench.log")
    host, port = d.ready["rpc"].rsplit(":", 1)
    rows = []
    try:
        for n in (1, 8, 64):
            ops, batch = await ops_per_second((host, int(port)), n, seconds)
            rows.append(f"| {n} | {ops:,.0f} | {batch:.1f} | {ops / floor_syncs:.2f} |")
            log(f"  {n:>2} clients: {ops:8.0f} ops/s, {batch:5.1f} txns per sync, "
                f"{ops / floor_syncs:5.2f} x the 1-txn sync rate")
    finally:
        d.stop()
    return rows


async def bench_tail_lag(root: str, seconds: float, shared: str) -> str:
    """Lag of a standby tailing ``shared``: finalized segments (roll every 1 s), plus the
    in-progress segment when ``shared`` is a quorum journal."""
    in_progress = "true" if shared.startswith("qjournal://") else "false"
    c1 = nn_conf(root, "t1", shared, **{"dfs.ha.tail-edits.period": "100ms", "dfs.ha.log-roll.period": "1s"})
    c2 = nn_conf(root, "t2", shared, **{"dfs.ha.tail-edits.period": "100ms",
                                        "dfs.ha.tail-edits.in-progress": in_progress})
    await format_namenode(c1, cluster_id="CID-bench", namespace_id=8)
    shutil.copytree(f"{root}/t1", f"{root}/t2", ignore=shutil.ignore_patterns("in_use.lock"))
    a, s = NameNode(c1, "nn1"), NameNode(c2, "nn2")
    await a.start("127.0.0.1", 0)
    await s.start(serve=False)
    await a.ha_service.transition_to_active("user")
    client = DFSClient(addresses=[("nn1", *a.address)], user="bench")  # type: ignore[misc]
    lags = []
    stop = time.perf_counter() + seconds
    k = 0

    async def sample() -> None:
        while time.perf_counter() < stop:
            lags.append(a.last_applied_txid - s.last_applied_txid)
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    while time.perf_counter() < stop:
        await asyncio.gather(*(client.mkdirs(f"/t/{k}-{j}") for j in range(16)))
        k += 1
    await sampler
    await a.editlog.roll()  # type: ignore[union-attr]
    target = a.last_applied_txid
    t0 = time.perf_counter()
    while s.last_applied_txid < target - 1:
        s.tailer.trigger()  # type: ignore[union-attr]
        await asyncio.sleep(0.01)
    catch = time.perf_counter() - t0
    await client.close()
    await a.stop()
    await s.stop()
    line = (f"tail lag ({'finalized + in-progress' if in_progress == 'true' else 'finalized segments'}) "
            f"while writing {target} txns: mean {statistics.mean(lags):.0f} txns, "
            f"max {max(lags)} txns; caught up {catch * 1000:.0f} ms after the last roll")
    log("  " + line)
    return line


async def bench_failover(root: str, n_edits: int, uri_of, tag: str = "") -> tuple[float, float]:
    """(seconds from transition_to_active to the first accepted write, seconds to log the edits)."""
    shared = uri_of(f"fo{n_edits}")
    name = f"{n_edits}{tag}"
    c1 = nn_conf(root, f"f1-{name}", shared, **{"dfs.ha.tail-edits.period": "3600s"})
    c2 = nn_conf(root, f"f2-{name}", shared, **{"dfs.ha.tail-edits.period": "3600s"})
    await format_namenode(c1, cluster_id="CID-bench", namespace_id=9)
    shutil.copytree(f"{root}/f1-{name}", f"{root}/f2-{name}", ignore=shutil.ignore_patterns("in_use.lock"))
    a, s = NameNode(c1, "nn1"), NameNode(c2, "nn2")
    await a.start(serve=False)
    await s.start("127.0.0.1", 0)
    await a.ha_service.transition_to_active("user")
    el, ns = a.editlog, a.namespace
    t0 = time.perf_counter()
    for i in range(n_edits):
        ctx = CallContext("bench", ts=i)
        txid, _ = await el.log_edit(lambda: ns.mkdirs(ctx, f"/e/{i // 1000}/{i}", create_parent=True)  # type: ignore[union-attr]
                                    if i % 1000 else ns.mkdirs(ctx, f"/e/{i // 1000}"))  # type: ignore[union-attr]
        if i % 1000 == 999:
            await el.log_sync(txid)  # type: ignore[union-attr]
    await el.log_sync()  # type: ignore[union-attr]
    gen = time.perf_counter() - t0
    await a.ha_service.transition_to_standby("user")  # finalize; the standby has tailed nothing since its image
    client = DFSClient(addresses=[("nn2", *s.address)], user="bench")  # type: ignore[misc]
    t0 = time.perf_counter()
    await s.ha_service.transition_to_active("user")
    await client.mkdirs("/first-write")
    took = time.perf_counter() - t0
    log(f"    phases: {s.ha_service.last_transition}")
    await client.close()
    await s.stop()
    await a.stop()
    return took, gen


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="duration of each throughput run")
    ap.add_argument("--journal", choices=("file", "qjm"), default="file")
    ap.add_argument("--big", action="store_true", help="also fail over after 10^6 edits")
    ap.add_argument("--failover-only", action="store_true", help="skip the throughput and tail-lag runs")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = tempfile.mkdtemp(prefix="nnbench-")
    jns = JNs(root) if args.journal == "qjm" else None
    try:
        def uri_of(jid: str) -> str:
            return jns.uri(jid) if jns else f"file://{root}/{jid}"

        log(f"# NameNode bench, journal={args.journal}, cpus={os.cpu_count()}, python {sys.version.split()[0]}, "
            f"load average at start {os.getloadavg()[0]:.1f}")
        syncs = batch = 0.0
        rows: list[str] = []
        tail = "(tail lag not measured)"
        if not args.failover_only:
            syncs, batch = await journal_floor(uri_of("floor"), args.seconds)
            log(f"journal floor: {syncs:,.0f} syncs/s (1 txn per sync), {batch:,.0f} txns/s in 1000-txn batches")
            log("| clients | ops/s | txns per sync | ops/s : 1-txn syncs/s |")
            rows = await bench_ops(root, uri_of("ops") if jns else None, args.seconds, syncs)
            tail = await bench_tail_lag(root, args.seconds, uri_of("tail"))
        # the first failover of the process pays one-time costs (imports, first HTTP session): labelled cold
        sizes = ([1, 1, 100_000] if not args.failover_only else [1]) + ([1_000_000] if args.big else [])
        fo = []
        for k, n in enumerate(sizes):
            took, gen = await bench_failover(root, n, lambda jid: uri_of(f"{jid}x{k}"), tag=f"{k}")
            fo.append((f"{n:,}" + (" (cold process)" if k == 0 else ""), n, took, gen))
            log(f"  failover after {n:>9,} edits since the checkpoint: first write accepted "
                f"{took * 1000:,.0f} ms after transition_to_active (logging them took {gen:.1f} s)")
        log(f"\nload average at end {os.getloadavg()[0]:.1f}\nmarkdown:")
        log(f"journal floor ({args.journal}): {syncs:,.0f} syncs/s at 1 txn/sync; {batch:,.0f} txns/s at 1000 txns/sync\n")
        log("| clients | ops/s | txns per journal sync | ops/s ÷ 1-txn syncs/s |\n|---|---|---|---|")
        for r in rows:
            log(r)
        log(f"\n{tail}\n")
        log("| edits since checkpoint | transition_to_active → first accepted write | replay rate |\n|---|---|---|")
        for label, n, took, _gen in fo:
            log(f"| {label} | {took * 1000:,.0f} ms | {n / took:,.0f} edits/s |")
    finally:
        if jns:
            jns.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

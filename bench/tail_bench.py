"""Reads that scale: standby lag with segment tailing and with RPC tailing, and reads served by observers.

Why: issue 13's targets are relative to the load that produces them. The
standby's lag is measured while the active takes its full write rate (64
concurrent clients), once with in-progress tailing by re-downloading the
segment (the JournalNodes' edit caches switched off, so every round streams)
and once with RPC tailing from the caches (HDFS-13150), with the bytes each
moved per second beside the edit bytes written per second. Then read ops/s
with 0, 1 and 2 observer NameNodes beside the active, and the write rate at
the same time.

Everything runs as real processes on 127.0.0.1: three JournalNodes, the
NameNodes, and the load generators (``--procs`` processes of asyncio clients;
their CPU time is reported). On a 2-core machine the processes share two
cores: read the observer rows as what this machine gives, not as scaling.

Lag is sampled every ``--sample-ms`` from both NameNodes' ``get_stats``, over
the steady part of the write load (its first and last half second left out): in
txns (the active's synced txid, i.e. committed on a quorum, minus the
standby's last applied) and in ms (how long the oldest committed txn the
standby has not applied has been committed, to the sampling resolution).

Usage: ``.venv/bin/python bench/tail_bench.py [--seconds 6] [--procs 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

from qjournal.config import Configuration
from qjournal.namenode.dfs_client import DFSClient, HAServiceClient
from qjournal.namenode.format import format_namenode
from qjournal.util.proc import qjournal_argv, start_daemon

NS = "ns1"
JID = NS


def log(msg: str) -> None:
    print(msg, flush=True)


class Cluster:
    """Three JournalNodes and ``1 + standbys + observers`` NameNodes, each its own process."""

    def __init__(self, root: str, cache_bytes: int, n_standby: int, n_observers: int,
                 tail_period: str, backoff_max: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.jns = [start_daemon(
            f"jn{i}", qjournal_argv("-D", "qjournal.log.json=false", "-D", "qjournal.log.level=WARNING",
                                    "-D", f"dfs.journalnode.edit-cache-size.bytes={cache_bytes}",
                                    "journalnode", "--edits-dir", f"{root}/jn{i}",
                                    "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"),
            log_path=f"{root}/jn{i}.log") for i in range(3)]
        self.uri = "qjournal://" + ";".join(d.ready["rpc"] for d in self.jns) + f"/{JID}"
        self.ids = [f"nn{i + 1}" for i in range(1 + n_standby + n_observers)]
        self.observers = self.ids[1 + n_standby:]
        self.common = {
            "dfs.nameservices": NS, f"dfs.ha.namenodes.{NS}": ",".join(self.ids),
            "dfs.namenode.shared.edits.dir": self.uri,
            "dfs.ha.tail-edits.in-progress": "true",
            "dfs.ha.tail-edits.period": tail_period, "dfs.ha.tail-edits.period.backoff-max": backoff_max,
            "dfs.ha.log-roll.period": "120s", "dfs.namenode.checkpoint.check.period": "3600s",
            "qjournal.namenode.superuser": "bench", "qjournal.log.json": "false",
            "qjournal.log.level": "WARNING",
        }
        c1 = self._conf("nn1")
        asyncio.run(format_namenode(c1, cluster_id="CID-tail", namespace_id=13))
        for nn in self.ids[1:]:
            shutil.copytree(f"{root}/nn1", f"{root}/{nn}", ignore=shutil.ignore_patterns("in_use.lock"))
        self.nns = {}
        self.addr: dict[str, tuple[str, int]] = {}
        for nn in self.ids:
            opts = [x for k, v in sorted({**self.common, "dfs.namenode.name.dir": f"file://{root}/{nn}"}.items())
                    for x in ("-D", f"{k}={v}")]
            d = start_daemon(nn, qjournal_argv(*opts, "namenode", "--nn-id", nn, "--rpc-address", "127.0.0.1:0"),
                             log_path=f"{root}/{nn}.log")
            self.nns[nn] = d
            host, port = d.ready["rpc"].rsplit(":", 1)
            self.addr[nn] = (host, int(port))
        asyncio.run(self._transitions())

    def _conf(self, nn: str) -> Configuration:
        c = Configuration()
        for k, v in sorted(self.common.items()):
            c.set(k, v)
        c.set("dfs.namenode.name.dir", f"file://{self.root}/{nn}")
        return c

    async def _transitions(self) -> None:
        for nn in self.ids:
            c = HAServiceClient(*self.addr[nn])
            try:
                if nn == "nn1":
                    await c.transition_to_active("user")
                elif nn in self.observers:
                    await c.transition_to_observer("user")
            finally:
                await c.close()

    def client_conf(self, observer_reads: bool) -> dict[str, str]:
        conf = dict(self.common)
        for nn in self.ids:
            conf[f"dfs.namenode.rpc-address.{NS}.{nn}"] = "%s:%d" % self.addr[nn]
        if observer_reads:
            conf[f"dfs.client.failover.proxy.provider.{NS}"] = (
                "org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider")
        return conf

    def jn_bytes_written(self) -> int:
        """BytesWritten of the journal on the first JournalNode (its /jmx)."""
        url = "http://" + self.jns[0].ready["http"] + "/jmx"
        with urllib.request.urlopen(url, timeout=10) as r:
            beans = json.load(r).get("beans", [])
        return sum(int(b.get("BytesWritten", 0)) for b in beans if JID in str(b.get("name", "")))

    def close(self) -> None:
        for d in list(self.nns.values()) + self.jns:
            d.stop()


def _conf_of(values: dict[str, str]) -> Configuration:
    c = Configuration()
    for k, v in sorted(values.items()):
        c.set(k, v)
    return c


# ------------------------------------------------------------------ load generator processes
def _load_proc(conf_values: dict[str, str], role: str, clients: int, seconds: float, seed: int,
               start_at: float, out: "multiprocessing.Queue") -> None:
    """One load process: ``clients`` asyncio clients doing writes (mkdirs) or reads (stat/list)."""
    async def main() -> tuple[int, int]:
        conf = _conf_of(conf_values)
        rng = random.Random(seed)
        cs = [DFSClient(conf, user="bench") for _ in range(clients)]
        await asyncio.sleep(max(0.0, start_at - time.time()))
        stop = time.time() + seconds
        counts = [0] * clients

        async def run(i: int, c: DFSClient) -> None:
            k = 0
            while time.time() < stop:
                if role == "write":
                    await c.mkdirs(f"/w/{seed}-{i}-{k}")
                elif k % 4 == 0:
                    await c.list_status(f"/r/d{rng.randrange(100)}")
                else:
                    await c.get_file_info(f"/r/d{rng.randrange(100)}/f{rng.randrange(10)}")
                k += 1
                counts[i] += 1

        await asyncio.gather(*(run(i, c) for i, c in enumerate(cs)))
        obs = sum(getattr(c, "observer_read_count", 0) for c in cs)
        for c in cs:
            await c.close()
        return sum(counts), obs

    n, obs = asyncio.run(main())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.put((role, n, obs, ru.ru_utime + ru.ru_stime))


def run_load(conf_values: dict[str, str], plan: list[tuple[str, int]], seconds: float) -> dict:
    """Run the load processes of ``plan`` ((role, clients) each) at once; totals per role."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    start_at = time.time() + 2.0  # every process connected before the window opens
    ps = [ctx.Process(target=_load_proc, args=(conf_values, role, n, seconds, k, start_at, q))
          for k, (role, n) in enumerate(plan)]
    for p in ps:
        p.start()
    res = [q.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join(timeout=30)
    out: dict = {}
    for role, n, obs, cpu in res:
        o = out.setdefault(role, {"ops": 0, "observer_ops": 0, "cpu_s": 0.0})
        o["ops"] += n
        o["observer_ops"] += obs
        o["cpu_s"] += cpu
    return out


# ------------------------------------------------------------------ standby lag
async def sample_lag(cl: Cluster, standby: str, seconds: float, sample_ms: float) -> tuple[list, list, dict, dict]:
    a = DFSClient(addresses=[("nn1", *cl.addr["nn1"])], user="bench")
    s = DFSClient(addresses=[(standby, *cl.addr[standby])], user="bench")
    active_t: list[tuple[int, int]] = []
    lag_txns: list[int] = []
    lag_ms: list[float] = []
    s0 = (await s.call("get_stats"))["tailer"]
    # the load starts 2 s after run_load is called (its processes connect first); sample its steady
    # state: from 0.5 s after it starts to 0.5 s before it ends
    await asyncio.sleep(2.5)
    t_end = time.perf_counter() + seconds - 1.0
    while time.perf_counter() < t_end:
        sa = await a.call("get_stats")
        at = int((sa["editlog"] or {}).get("synced_txid") or 0)  # committed on a quorum
        active_t.append((sa["time_ms"], at))  # the NameNodes' own clocks: the sampler's stalls do not count
        ss = await s.call("get_stats")
        st, ts = ss["last_applied_txid"], ss["time_ms"]
        lag_txns.append(max(0, at - st))
        # the oldest committed txn the standby lacks: first seen committed when the synced txid passed st
        first = next((t for t, x in active_t if x > st), None)
        lag_ms.append(0.0 if first is None else max(0.0, ts - first))
        await asyncio.sleep(sample_ms / 1000)
    s1 = (await s.call("get_stats"))["tailer"]
    await a.close()
    await s.close()
    return lag_txns, lag_ms, s0, s1


def pct(xs: list, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else 0.0


def bench_lag(root: str, mode: str, seconds: float, procs: int, clients: int, sample_ms: float,
              period: str, backoff_max: str) -> str:
    cache = 32 * 1024 * 1024 if mode == "rpc" else 0
    cl = Cluster(f"{root}/{mode}", cache, n_standby=1, n_observers=0, tail_period=period, backoff_max=backoff_max)
    try:
        conf = cl.client_conf(observer_reads=False)
        asyncio.run(_mkdirs(conf, "/w"))
        w0 = cl.jn_bytes_written()
        loop_res: dict = {}

        def load() -> None:
            loop_res.update(run_load(conf, [("write", clients // procs)] * procs, seconds))

        th = threading.Thread(target=load)
        th.start()
        lag_txns, lag_ms, s0, s1 = asyncio.run(sample_lag(cl, "nn2", seconds, sample_ms))
        th.join()
        w1 = cl.jn_bytes_written()
        ops = loop_res["write"]["ops"] / seconds
        edit_bps = (w1 - w0) / seconds
        read_bps = ((s1["bytes_rpc"] - s0["bytes_rpc"]) + (s1["bytes_streamed"] - s0["bytes_streamed"])) / seconds
        row = (f"| {mode} | {ops:,.0f} | {pct(lag_txns, 50):.0f} / {pct(lag_txns, 99):.0f} / {max(lag_txns)} | "
               f"{pct(lag_ms, 50):.0f} / {pct(lag_ms, 99):.0f} / {max(lag_ms):.0f} | "
               f"{edit_bps / 1e6:.2f} | {read_bps / 1e6:.2f} | {read_bps / edit_bps if edit_bps else 0:.1f} | "
               f"{s1['rpc_reads'] - s0['rpc_reads']} / {s1['rpc_fallbacks'] - s0['rpc_fallbacks']} |")
        log(row)
        return row
    finally:
        cl.close()


async def _mkdirs(conf_values: dict[str, str], *paths: str) -> None:
    async with DFSClient(_conf_of(conf_values), user="bench") as c:
        for p in paths:
            await c.mkdirs(p)


async def _populate(conf_values: dict[str, str]) -> None:
    async with DFSClient(_conf_of(conf_values), user="bench") as c:
        await c.mkdirs("/w")
        for d in range(100):
            await c.mkdirs(f"/r/d{d}")
            await asyncio.gather(*(c.create(f"/r/d{d}/f{f}") for f in range(10)))


def bench_observers(root: str, n_obs: int, seconds: float, procs: int, readers: int, writers: int,
                    period: str, backoff_max: str) -> str:
    cl = Cluster(f"{root}/obs{n_obs}", 32 * 1024 * 1024, n_standby=1, n_observers=n_obs,
                 tail_period=period, backoff_max=backoff_max)
    try:
        conf = cl.client_conf(observer_reads=n_obs > 0)
        asyncio.run(_populate(cl.client_conf(observer_reads=False)))
        plan = [("write", writers)] + [("read", readers // procs)] * procs
        res = run_load(conf, plan, seconds)
        r, w = res["read"], res["write"]
        row = (f"| {n_obs} | {r['ops'] / seconds:,.0f} | {r['observer_ops'] / max(r['ops'], 1):.0%} | "
               f"{w['ops'] / seconds:,.0f} | {r['cpu_s'] / seconds:.2f} / {w['cpu_s'] / seconds:.2f} |")
        log(row)
        return row
    finally:
        cl.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--procs", type=int, default=2, help="load generator processes per role")
    ap.add_argument("--clients", type=int, default=64, help="concurrent writers in the lag runs")
    ap.add_argument("--readers", type=int, default=32, help="concurrent readers in the observer runs")
    ap.add_argument("--writers", type=int, default=8, help="concurrent writers in the observer runs")
    ap.add_argument("--sample-ms", type=float, default=5.0)
    ap.add_argument("--period", default="10ms", help="dfs.ha.tail-edits.period")
    ap.add_argument("--backoff-max", default="200ms", help="dfs.ha.tail-edits.period.backoff-max")
    ap.add_argument("--only", choices=("lag", "observers"), default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="tailbench-")
    try:
        log(f"# tail bench, cpus={os.cpu_count()}, python {sys.version.split()[0]}, "
            f"load average at start {os.getloadavg()[0]:.2f}")
        if args.only in (None, "lag"):
            log(f"## standby lag at full write rate ({args.clients} writers in {args.procs} processes, "
                f"tail period {args.period}, back-off to {args.backoff_max}, {args.seconds:.0f} s)")
            log("| tailing | writes/s | lag txns p50 / p99 / max | lag ms p50 / p99 / max | edit MB/s written "
                "| MB/s read by the standby | read : written | RPC rounds / streamed rounds |")
            log("|---|---|---|---|---|---|---|---|")
            for mode in ("stream", "rpc"):
                bench_lag(root, mode, args.seconds, args.procs, args.clients, args.sample_ms,
                          args.period, args.backoff_max)
        if args.only in (None, "observers"):
            log(f"## read ops/s with observers ({args.readers} readers in {args.procs} processes, "
                f"{args.writers} writers, {args.seconds:.0f} s)")
            log("| observers | reads/s | reads served by observers | writes/s (same time) "
                "| load CPU s/s readers / writers |")
            log("|---|---|---|---|---|")
            for n in (0, 1, 2):
                bench_observers(root, n, args.seconds, args.procs, args.readers, args.writers,
                                args.period, args.backoff_max)
        log(f"load average at end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

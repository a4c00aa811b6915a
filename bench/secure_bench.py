"""What security costs: commit latency and NameNode ops/s on a plain and a ``--secure`` local cluster, one run.

Why: mutual TLS on every RPC, certificate identities and service-level authorization are on the path of every
journal write and every NameNode call (docs/security.md). Their price has to be measured, and a price measured on
another day on a shared machine means nothing, so both clusters run at once and the cells interleave.

What it measures, on two ``LocalCluster`` s (ZooKeeper, three JournalNodes, two NameNodes, two ZKFCs; one of them
started with ``--secure``):

* quorum commit latency: a ``QuorumJournalManager`` writer on its own journal id of the cluster's JournalNodes,
  one 100-byte record per sync, one in flight (on the secure cluster it presents the NameNodes' certificate, the
  only one the JournalNodes' ``security.qjournal.service.protocol.acl`` admits as a writer);
* NameNode ops/s: ``create`` of empty files by 1 and 64 ``DFSClient`` s, each its own connection (on the secure
  cluster as the administrator's certificate), with latency percentiles.

Every round runs every cell once, in a seeded shuffled order. Printed: p50/p99 and ops/s per cell (median over
rounds) and the secure : plain ratio.

Usage: ``.venv/bin/python bench/secure_bench.py [--seconds 3] [--rounds 3] [--seed 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from qjm_bench import pct  # noqa: E402

from qjournal.client.qjm import QuorumJournalManager  # noqa: E402
from qjournal.client.settings import QJMSettings  # noqa: E402
from qjournal.config import Configuration  # noqa: E402
from qjournal.localcluster.launcher import ROLE_PRINCIPALS, LocalCluster  # noqa: E402
from qjournal.namenode.dfs_client import DFSClient  # noqa: E402
from qjournal.protocol.messages import NamespaceInfo  # noqa: E402
from qjournal.protocol.segment import OP_DATA, encode_record  # noqa: E402


class Side:
    """One cluster and its load generators."""

    def __init__(self, root: str, secure: bool) -> None:
        self.secure = secure
        self.name = "secure" if secure else "plain"
        self.cluster = LocalCluster(os.path.join(root, self.name), out=lambda s: None, secure=secure)
        self.conf: Configuration | None = None
        self.qjm: QuorumJournalManager | None = None
        self.txid = 1

    def up(self) -> None:
        self.cluster.up(120.0)
        self.conf = Configuration.load(self.cluster.conf_dir)

    def writer_conf(self) -> Configuration:
        """The cluster's configuration; on the secure side with the NameNodes' certificate (a journal writer)."""
        conf = Configuration.load(self.cluster.conf_dir)
        if self.secure:
            c = self.cluster._cert(ROLE_PRINCIPALS["namenode"])
            conf.set("qjournal.rpc.tls.cert.file", c.cert)
            conf.set("qjournal.rpc.tls.key.file", c.key)
        return conf

    async def start_writer(self) -> None:
        assert self.conf is not None
        shared = self.conf.get("dfs.namenode.shared.edits.dir")
        uri = shared.rsplit("/", 1)[0] + "/benchlog"
        wconf = self.writer_conf()
        self.qjm = QuorumJournalManager(uri, wconf, settings=QJMSettings.from_conf(wconf).with_overrides(
            write_txns_timeout_ms=20000))
        await self.qjm.format(NamespaceInfo(4242, "CID-secure-bench"))
        await self.qjm.recover_unfinalized_segments()

    async def commit_cell(self, seconds: float) -> tuple[list[float], float]:
        assert self.qjm is not None
        first = self.txid
        stream = await self.qjm.start_log_segment(first)
        body = b"b" * 100
        lat: list[float] = []
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            stream.write_raw(encode_record(self.txid, OP_DATA, body), self.txid, 1)
            stream.mark()
            t0 = time.perf_counter()
            await stream.sync()
            lat.append(time.perf_counter() - t0)
            self.txid += 1
        await self.qjm.finalize_log_segment(first, self.txid - 1)
        return lat, len(lat) / seconds

    async def ops_cell(self, clients: int, seconds: float, tag: str) -> tuple[list[float], float]:
        assert self.conf is not None
        kw = {} if self.secure else {"user": "root", "groups": ["supergroup"]}
        cs = [DFSClient(self.conf, **kw) for _ in range(clients)]
        lat: list[float] = []
        try:
            for i, c in enumerate(cs):
                await c.mkdirs(f"/{tag}/c{i}")
            t_end = time.perf_counter() + seconds
            t_start = time.perf_counter()

            async def run(i: int, c: DFSClient) -> None:
                k = 0
                while time.perf_counter() < t_end:
                    t0 = time.perf_counter()
                    await c.create(f"/{tag}/c{i}/f{k}")
                    lat.append(time.perf_counter() - t0)
                    k += 1
            await asyncio.gather(*(run(i, c) for i, c in enumerate(cs)))
            return lat, len(lat) / (time.perf_counter() - t_start)
        finally:
            for c in cs:
                await c.close()

    async def close(self) -> None:
        if self.qjm is not None:
            await self.qjm.close(drain_timeout_ms=0)

    def down(self) -> None:
        self.cluster.down()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="secure-bench-")
    sides = [Side(root, False), Side(root, True)]
    print(f"# secure bench: seed {args.seed}, {args.rounds} rounds x {args.seconds:.0f} s per cell, "
          f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[tuple[str, str], list] = {}
    try:
        for s in sides:
            await asyncio.to_thread(s.up)
            await s.start_writer()
        cells = [(s, kind) for s in sides for kind in ("commit", "ops1", "ops64")]
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            order = cells[:]
            rng.shuffle(order)
            for s, kind in order:
                if kind == "commit":
                    lat, rate = await s.commit_cell(args.seconds)
                else:
                    n = int(kind[3:])
                    lat, rate = await s.ops_cell(n, args.seconds, f"r{r}{kind}")
                acc = results.setdefault((s.name, kind), [[], []])
                acc[0].extend(lat)
                acc[1].append(rate)
            print(f"  round {r + 1}/{args.rounds}, load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for s in sides:
            await s.close()
            s.down()
        shutil.rmtree(root, ignore_errors=True)
    labels = {"commit": "quorum commit, 1 record, 1 in flight", "ops1": "NameNode create, 1 client",
              "ops64": "NameNode create, 64 clients"}
    print("\n| cell | plain p50 ms | secure p50 ms | plain p99 ms | secure p99 ms | plain ops/s | secure ops/s "
          "| secure ÷ plain (ops/s) |\n|---|---|---|---|---|---|---|---|")
    for kind in ("commit", "ops1", "ops64"):
        p, s = results[("plain", kind)], results[("secure", kind)]
        pr, sr = statistics.median(p[1]), statistics.median(s[1])
        print(f"| {labels[kind]} | {pct(p[0], 50) * 1e3:.3f} | {pct(s[0], 50) * 1e3:.3f} | "
              f"{pct(p[0], 99) * 1e3:.3f} | {pct(s[0], 99) * 1e3:.3f} | {pr:,.0f} | {sr:,.0f} | {sr / pr:.2f} |")
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

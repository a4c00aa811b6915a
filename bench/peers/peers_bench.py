"""qjournal beside etcd and ZooKeeper, measured in one run on one machine.

Why: what a user compares qjournal with is what they would run instead (etcd and ZooKeeper, both durable and
replicated). Numbers from another day on a shared machine are not a comparison, so this benchmark starts all three
itself (``systems.py``) and drives them with load generators of one design (Python asyncio in this process):

* cells: for each system, 1, 8 and 64 clients (each its own connection, one write in flight), and 64 writes in
  flight on one connection ("64 pipelined"); values of 100 B and 1 KiB (the NameNode's create carries no value: its
  rows are measured once and shown in both tables); plus qjournal's bare quorum log (one record per sync, one in
  flight) for the latency table, written by ``qjm_writer.py``: the quorum writer in a process of its own on the
  product's event loop, as the NameNode runs it (its "load-generator CPU" is that process's);
* interleaving: every round runs every cell once for ``--seconds``, in an order shuffled by ``--seed``; ``--rounds``
  rounds. The machine's noise hits all systems alike; the tables give the median ops/s over rounds and the
  latency percentiles over all writes of a cell;
* the floor: one ``fdatasync`` of a 100-byte write on the same disk plus one loopback round trip, measured as a
  cell of every round (in the shuffled order, so the floor sees the machine the cells see), median over rounds:
  once appended to a file (the sync also makes a new file size durable: the floor the issue set the target
  against) and once written into preallocated space (what the JournalNodes' open segments do since the fourth
  session: the stricter floor); and, as context only (the targets stay against the issue's floor), the quorum
  flush: three writers on this one disk, as the three JournalNodes are, started together, until two of them are
  durable (``qjm_bench.quorum_flush_s``; the flushes queue behind each other on one disk);
* CPU: the load generator's CPU (this process, ``time.process_time``) and the servers' CPU (``/proc``) per write.

Usage: ``.venv/bin/python bench/peers/peers_bench.py [--seconds 3] [--rounds 3] [--seed 1]`` (``make bench-peers``
installs etcd and the Python clients first).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from qjm_bench import fdatasync_floor_s, loopback_rtt_s, pct, quorum_flush_s  # noqa: E402
from systems import SYSTEMS, QuorumLog, cpu_seconds  # noqa: E402


#: (clients, in flight per client): separate connections, or one connection with 64 in flight
SHAPES = [(1, 1), (8, 1), (64, 1), (1, 64)]
VALUES = [100, 1024]


def shape_label(shape: tuple[int, int]) -> str:
    return f"{shape[0]} clients" if shape[1] == 1 else f"{shape[1]} pipelined"


@dataclass
class Cell:
    system: str
    value: int
    shape: tuple[int, int]
    ops_per_s: list[float] = field(default_factory=list)
    lat: list[float] = field(default_factory=list)
    gen_cpu_per_op: list[float] = field(default_factory=list)
    srv_cpu_per_op: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.system} {self.value if self.system != 'qjournal' else '-'} {shape_label(self.shape)}"


async def run_cell(driver, cell: Cell, seconds: float, round_no: int) -> None:
    if isinstance(driver, QuorumLog):
        srv0 = sum(cpu_seconds(p) for p in driver.pids())
        lat, writer_cpu = await driver.run(seconds, cell.value)
        srv = sum(cpu_seconds(p) for p in driver.pids()) - srv0
        cell.ops_per_s.append(len(lat) / seconds)
        cell.lat.extend(lat)
        cell.gen_cpu_per_op.append(writer_cpu / max(len(lat), 1))
        cell.srv_cpu_per_op.append(srv / max(len(lat), 1))
        return
    clients, depth = cell.shape
    tag = f"r{round_no}v{cell.value}c{clients}d{depth}"
    await driver.connect(clients, tag)
    value = b"v" * cell.value
    lat: list[float] = []  # one entry per write: its length is the cell's count of writes
    stop_at = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        k = 0
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await driver.op(i, k, value)
            lat.append(time.perf_counter() - t0)
            k += 1

    srv0 = sum(cpu_seconds(p) for p in driver.pids())
    gen0 = time.process_time()
    t0 = time.perf_counter()
    if depth == 1:
        await asyncio.gather(*(worker(i) for i in range(clients)))
    else:
        await asyncio.gather(*(lane_worker(driver, lane, depth, stop_at, value, lat) for lane in range(depth)))
    ops = len(lat)
    wall = time.perf_counter() - t0
    gen = time.process_time() - gen0
    srv = sum(cpu_seconds(p) for p in driver.pids()) - srv0
    await driver.close()
    cell.ops_per_s.append(ops / wall)
    cell.lat.extend(lat)
    cell.gen_cpu_per_op.append(gen / max(ops, 1))
    cell.srv_cpu_per_op.append(srv / max(ops, 1))


async def lane_worker(driver, lane: int, depth: int, stop_at: float, value: bytes, lat: list[float]) -> None:
    """One of ``depth`` concurrent writes on client 0's single connection."""
    k = 0
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        await driver.op(0, lane + depth * k, value)
        lat.append(time.perf_counter() - t0)
        k += 1


def fmt_ops(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f}" if xs else "-"


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of one cell in one round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1, help="shuffles the order of the cells in each round")
    ap.add_argument("--systems", default="qjournal,etcd,zookeeper")
    ap.add_argument("--dir", default=None, help="where the servers keep their data (default: a temp dir)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = args.dir or tempfile.mkdtemp(prefix="peers-bench-")
    names = [s for s in args.systems.split(",") if s]
    print(f"# peers bench: seed {args.seed}, {args.rounds} rounds x {args.seconds:.0f} s per cell, "
          f"cpus {os.cpu_count()}, python {sys.version.split()[0]}, load average at start "
          f"{os.getloadavg()[0]:.2f}, data in {root}", flush=True)
    drivers: dict = {}
    cells: list[Cell] = []
    floors: list[float] = []  # appended
    floors_pre: list[float] = []  # preallocated
    quorum_flushes: list[float] = []  # two of three writers on this disk (context)
    rtts: list[float] = []
    try:
        for n in names:
            d = SYSTEMS[n](root)
            await d.start()
            drivers[n] = d
            print(f"  started {n}", flush=True)
        if "qjournal" in drivers:
            drivers["qjm-log"] = QuorumLog(drivers["qjournal"])
            await drivers["qjm-log"].start()
            print(f"  started the qjm-log writer (its own process, event loop {drivers['qjm-log'].loop_name})",
                  flush=True)
        floor_dir = os.path.join(root, "floor")
        os.makedirs(floor_dir)
        cells.append(Cell("floor", 100, (1, 1)))
        for n in names:
            for v in ([100] if n == "qjournal" else VALUES):
                for shape in SHAPES:
                    cells.append(Cell(n, v, shape))
        if "qjm-log" in drivers:
            for v in VALUES:
                cells.append(Cell("qjm-log", v, (1, 1)))
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            order = cells[:]
            rng.shuffle(order)
            for cell in order:
                if cell.system == "floor":
                    rtts.append(loopback_rtt_s())
                    floors.append(fdatasync_floor_s(floor_dir, 100, 500))
                    floors_pre.append(fdatasync_floor_s(floor_dir, 100, 500, preallocated=True))
                    quorum_flushes.append(quorum_flush_s(floor_dir, 100, 500))
                    continue
                await run_cell(drivers[cell.system], cell, args.seconds, r)
            print(f"  round {r + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
        report([c for c in cells if c.system != "floor"], floors, floors_pre, quorum_flushes, rtts, args)
    finally:
        if "qjm-log" in drivers:
            await drivers.pop("qjm-log").shutdown()
        for d in drivers.values():
            d.stop()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _ms_range(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:.3f} ms ({min(xs) * 1e3:.3f}-{max(xs) * 1e3:.3f})"


def report(cells: list[Cell], floors: list[float], floors_pre: list[float], quorum_flushes: list[float],
           rtts: list[float], args: argparse.Namespace) -> None:
    by = {(c.system, c.value, c.shape): c for c in cells}
    rtt_s = statistics.median(rtts)
    floor = statistics.median(floors) + rtt_s
    floor_pre = statistics.median(floors_pre) + rtt_s
    floor_quorum = statistics.median(quorum_flushes) + rtt_s
    out = ["", f"floor (median of {len(rtts)} rounds, min-max): fdatasync of 100 B appended {_ms_range(floors)}, "
               f"into preallocated space {_ms_range(floors_pre)}; loopback round trip {_ms_range(rtts)}",
           f"floor = {floor * 1e3:.3f} ms appended, {floor_pre * 1e3:.3f} ms preallocated; \"p50 ÷ floor\" "
           f"below is against the appended one",
           f"context: quorum flush (three preallocated writers on this disk, two durable) "
           f"{_ms_range(quorum_flushes)}; with the round trip {floor_quorum * 1e3:.3f} ms", "",
           "### One write in flight: latency (ms)", "",
           "| system | value | p50 | p99 | p50 ÷ floor | ops/s | load-generator CPU per op | server CPU per op |",
           "|---|---|---|---|---|---|---|---|"]
    for system in ("qjm-log", "qjournal", "etcd", "zookeeper"):
        for v in VALUES:
            c = by.get((system, v if system != "qjournal" else 100, (1, 1)))
            if c is None or (system == "qjournal" and v != 100):
                continue
            out.append(f"| {system if system != 'qjournal' else 'qjournal NameNode create'} | "
                       f"{v if system != 'qjournal' else '-'} | {pct(c.lat, 50) * 1e3:.3f} | "
                       f"{pct(c.lat, 99) * 1e3:.3f} | {pct(c.lat, 50) / floor:.1f}x | {fmt_ops(c.ops_per_s)} | "
                       f"{statistics.median(c.gen_cpu_per_op) * 1e6:,.0f} µs | "
                       f"{statistics.median(c.srv_cpu_per_op) * 1e6:,.0f} µs |")
    for v in VALUES:
        out += ["", f"### Durable writes per second, {v}-byte values (median of {args.rounds} rounds)", "",
                "| system | " + " | ".join(shape_label(s) for s in SHAPES) + " |",
                "|---|" + "---|" * len(SHAPES)]
        for system in ("qjournal", "etcd", "zookeeper"):
            row = []
            for s in SHAPES:
                c = by.get((system, 100 if system == "qjournal" else v, s))
                row.append(fmt_ops(c.ops_per_s) if c else "-")
            if any(r != "-" for r in row):
                label = "qjournal NameNode (create, no value)" if system == "qjournal" else system
                out.append(f"| {label} | " + " | ".join(row) + " |")
        for peer in ("etcd", "zookeeper"):
            ratios = []
            for s in SHAPES:
                q, p = by.get(("qjournal", 100, s)), by.get((peer, v, s))
                ratios.append(f"{statistics.median(q.ops_per_s) / statistics.median(p.ops_per_s):.2f}x"
                              if q and p else "-")
            if any(r != "-" for r in ratios):
                out.append(f"| qjournal ÷ {peer} | " + " | ".join(ratios) + " |")
    out += ["", "### Load-generator and server CPU per write (µs, median of rounds)", "",
            "| cell | ops/s | load generator | servers |", "|---|---|---|---|"]
    for c in cells:
        out.append(f"| {c.key} | {fmt_ops(c.ops_per_s)} | {statistics.median(c.gen_cpu_per_op) * 1e6:,.0f} | "
                   f"{statistics.median(c.srv_cpu_per_op) * 1e6:,.0f} |")
    q1, q64 = by.get(("qjournal", 100, (1, 1))), by.get(("qjournal", 100, (64, 1)))
    e1, e64 = by.get(("etcd", 100, (1, 1))), by.get(("etcd", 100, (64, 1)))
    ql = by.get(("qjm-log", 100, (1, 1)))
    out.append("")
    if ql:
        r = pct(ql.lat, 50) / floor
        out.append(f"target: quorum commit p50 within 3x the floor: {r:.1f}x ({'met' if r <= 3 else 'MISSED'}); "
                   f"against the preallocated floor {pct(ql.lat, 50) / floor_pre:.1f}x; context: "
                   f"{pct(ql.lat, 50) / floor_quorum:.1f}x the quorum flush plus the round trip")
    if q64 and e64:
        r = statistics.median(q64.ops_per_s) / statistics.median(e64.ops_per_s)
        out.append(f"target: NameNode ops/s >= 3x etcd puts/s with 64 clients: {r:.2f}x "
                   f"({'met' if r >= 3 else 'MISSED'})")
    if q1 and e1:
        r = statistics.median(q1.ops_per_s) / statistics.median(e1.ops_per_s)
        out.append(f"target: NameNode ops/s >= 1.5x etcd puts/s with 1 client: {r:.2f}x "
                   f"({'met' if r >= 1.5 else 'MISSED'})")
    out.append(f"load average at end {os.getloadavg()[0]:.2f}")
    print("\n".join(out), flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

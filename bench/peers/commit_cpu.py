"""CPU per durable write of each qjournal process, and A/B comparisons of two source trees back to back.

Why: on a shared 2-core machine the wall-clock rates of ``peers_bench.py`` move with everyone else's load, while the
CPU each process spends per write moves far less. This is the measure used to judge each change to the commit path
(docs/performance.md, "Commit path"): the same cluster as ``peers_bench.py`` (``systems.QJournal``: three
JournalNodes and a NameNode on loopback), one shape at a time:

* ``log``: the bare quorum log, one record per sync, one in flight, written by ``qjm_writer.py`` (the writer in a
  process of its own on the product's event loop, as ``peers_bench.py`` measures it; its CPU is the "client" figure);
* ``nn N``: NameNode creates from N clients, each with one call in flight (the clients are this process).

It prints ops/s, the p50 latency, CPU µs per write of a JournalNode (mean of the three), of the NameNode and of the
client (this process, or the writer's: user + system, and system alone for this process), and the JournalNode RPC
calls per write (from their ``/jmx``).

``--ab OTHER_SRC`` runs the shape alternately with ``OTHER_SRC`` ("base") and this tree's ``src`` ("new"), ``--reps``
times each, in fresh processes, and prints the median of each figure and the change.

Usage: ``.venv/bin/python bench/peers/commit_cpu.py --shape nn --clients 64 --seconds 5``
       ``.venv/bin/python bench/peers/commit_cpu.py --shape log --ab /tmp/base/src --reps 3``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from systems import QJournal, QuorumLog, user_sys_s  # noqa: E402


FIGURES = ("ops_s", "p50_us", "jn_us", "jn_sys_us", "nn_us", "nn_sys_us", "client_us", "client_sys_us",
           "jn_calls_per_op")


def jn_calls(q: QJournal) -> list[int]:
    """RPC calls served so far by each JournalNode (``RpcQueueTimeNumOps`` of its ``/jmx``)."""
    out = []
    for d in q.daemons[:3]:
        with urllib.request.urlopen(f"http://{d.ready['http']}/jmx", timeout=10) as r:
            beans = json.load(r)["beans"]
        out.append(sum(b.get("RpcQueueTimeNumOps", 0) for b in beans))
    return out


async def measure(shape: str, clients: int, seconds: float) -> dict:
    root = tempfile.mkdtemp(prefix="commit-cpu-")
    q = QJournal(root)
    await q.start()
    writer = None
    try:
        pids = q.pids()
        if shape == "nn":
            await q.connect(clients, "c")
            for k in range(50):  # warm up: connections, caches
                await q.op(0, 10**6 + k, b"")
        else:
            clients = 1
            writer = QuorumLog(q)  # the writer in its own process, on the product's event loop
            await writer.start()
            await writer.run(0.05, 100)  # warm up
        calls0 = jn_calls(q)
        cpu0 = [user_sys_s(p) for p in pids]
        me0 = os.times()
        lat: list[float] = []
        t0 = time.perf_counter()
        if writer is not None:
            lat, writer_cpu = await writer.run(seconds, 100)
        else:
            stop_at = t0 + seconds

            async def worker(i: int) -> None:
                k = 0
                while time.perf_counter() < stop_at:
                    t = time.perf_counter()
                    await q.op(i, k, b"")
                    lat.append(time.perf_counter() - t)
                    k += 1
            await asyncio.gather(*(worker(i) for i in range(clients)))
        wall = time.perf_counter() - t0
        cpu1 = [user_sys_s(p) for p in pids]
        me1 = os.times()
        calls1 = jn_calls(q)
        n = len(lat)
        per_op = 1e6 / n
        jn = [(b[0] + b[1] - a[0] - a[1]) * per_op for a, b in zip(cpu0[:3], cpu1[:3])]
        if writer is not None:
            client_us, client_sys_us = writer_cpu * per_op, 0.0  # the writer reports user + system together
        else:
            client_us = (me1.user + me1.system - me0.user - me0.system) * per_op
            client_sys_us = (me1.system - me0.system) * per_op
        return {
            "shape": shape if shape == "log" else f"nn{clients}", "ops_s": n / wall,
            "p50_us": statistics.median(lat) * 1e6,
            "jn_us": sum(jn) / 3,
            "jn_sys_us": sum((b[1] - a[1]) * per_op for a, b in zip(cpu0[:3], cpu1[:3])) / 3,
            "nn_us": (sum(cpu1[3]) - sum(cpu0[3])) * per_op if shape == "nn" else 0.0,
            "nn_sys_us": (cpu1[3][1] - cpu0[3][1]) * per_op if shape == "nn" else 0.0,
            "client_us": client_us,
            "client_sys_us": client_sys_us,
            "jn_calls_per_op": sum(b - a for a, b in zip(calls0, calls1)) / 3 / n,
            "load": os.getloadavg()[0],
        }
    finally:
        if writer is not None:
            await writer.shutdown()
        await q.close()
        q.stop()
        shutil.rmtree(root, ignore_errors=True)


def _fmt(figure: str, v: float) -> str:
    return f"{v:.3f}" if figure == "jn_calls_per_op" else f"{v:,.0f}"


def ab(args: argparse.Namespace) -> int:
    """Alternate base (``--ab``) and new (this tree) runs in fresh processes; print the medians."""
    mine = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
    argv = [sys.executable, os.path.abspath(__file__), "--shape", args.shape, "--clients", str(args.clients),
            "--seconds", str(args.seconds), "--json"]
    runs: dict[str, list[dict]] = {"base": [], "new": []}
    for r in range(args.reps):
        for name, src in (("base", args.ab), ("new", mine)):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            runs[name].append(res)
            print(f"{name} {r + 1}: " + " ".join(f"{k}={_fmt(k, res[k])}" for k in FIGURES)
                  + f" load={res['load']:.1f}", flush=True)
    print(f"\nmedians of {args.reps} runs each, shape {runs['new'][0]['shape']}, {args.seconds:g} s per run:")
    print("| figure | base | new | change |\n|---|---:|---:|---:|")
    for k in FIGURES:
        b = statistics.median(x[k] for x in runs["base"])
        n = statistics.median(x[k] for x in runs["new"])
        change = f"{(n / b - 1) * 100:+.0f}%" if b else "-"
        print(f"| {k} | {_fmt(k, b)} | {_fmt(k, n)} | {change} |")
    loads = [x["load"] for x in runs["base"] + runs["new"]]
    print(f"load average {min(loads):.1f}-{max(loads):.1f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("log", "nn"), default="nn")
    ap.add_argument("--clients", type=int, default=1, help="NameNode clients (shape nn)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--ab", metavar="OTHER_SRC", help="compare with the qjournal package under this src dir")
    ap.add_argument("--reps", type=int, default=3, help="runs of each tree with --ab")
    ap.add_argument("--json", action="store_true", help="print one JSON line (used by --ab)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.ab:
        return ab(args)
    res = asyncio.run(measure(args.shape, args.clients, args.seconds))
    if args.json:
        print(json.dumps(res))
    else:
        print(" ".join(f"{k}={_fmt(k, v)}" if k in FIGURES else f"{k}={v:.1f}" if k == "load" else f"{k}={v}"
                       for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Quorum journal commit benchmark: one writer, three JournalNode processes on loopback.

Why: the quorum write path is the NameNode's commit point. This measures what a
``sync`` costs (commit latency p50/p99, txns/s, MB/s) for batches of 1, 10, 100
and 1000 records of 100 bytes and 1 KiB, and prints each beside the physical
floor measured in the same run: one ``fdatasync`` of the batch's bytes on the
JournalNodes' disk plus one loopback TCP round trip. It also measures the
commit latency with one of the three JournalNodes stopped with SIGSTOP (a slow
or dead node must add no latency).

The writer runs on the product's event loop (``qjournal.event-loop``: uvloop when it is installed), as the
NameNode runs it. Records are framed before the timed loop (the application's encoding is not
the commit path); each timed ``sync`` sends one batch and waits for a quorum.

Run: ``.venv/bin/python bench/qjm_bench.py`` (about a minute). ``--nodes 3,5,7`` instead measures how the commit
latency changes as JournalNodes are added (seed 000 §performance), each quorum size against its own floor.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.cli._daemon import event_loop_factory  # noqa: E402
from qjournal.client.qjm import QuorumJournalManager  # noqa: E402
from qjournal.client.settings import QJMSettings  # noqa: E402
from qjournal.config import Configuration  # noqa: E402
from qjournal.protocol.messages import NamespaceInfo  # noqa: E402
from qjournal.protocol.segment import OP_DATA, RECORD_OVERHEAD, encode_record  # noqa: E402
from qjournal.util.proc import qjournal_argv, start_daemon  # noqa: E402

SHAPES = [(1, 100), (10, 100), (100, 100), (1000, 100), (1, 1024), (10, 1024), (100, 1024), (1000, 1024)]


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


# --- the floor ---------------------------------------------------------------------------

def fdatasync_floor_s(directory: str, nbytes: int, reps: int, preallocated: bool = False) -> float:
    """Median time of write(nbytes) + fdatasync on a file in ``directory``: appended (each write
    extends the file, so the sync also makes its new size durable), or ``preallocated`` (the file
    was given its space first, as the JournalNodes' open segments are: the sync is the data's alone)."""
    path = os.path.join(directory, "floor.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = b"\x5a" * nbytes
    times = []
    try:
        if preallocated:
            os.posix_fallocate(fd, 0, nbytes * reps)
            os.fsync(fd)
        for i in range(reps):
            t0 = time.perf_counter()
            os.pwrite(fd, buf, i * nbytes)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(times)


def quorum_flush_s(directory: str, nbytes: int, reps: int, nodes: int = 3) -> float:
    """Median time for ``nodes`` writers on one disk (three JournalNodes on this machine) to make a
    majority of them durable: each round, ``nodes`` threads each ``pwrite`` ``nbytes`` into their own
    preallocated file and ``fdatasync`` it, started together; the round's time runs from the first
    write's start to the return of the majority-th ``fdatasync`` (per-thread clocks, so the hand-off
    between threads is not counted). On one disk the flushes queue behind each other, so this is the
    physical floor of a quorum commit here, before any software; the issue's floor is one writer's.
    """
    majority = nodes // 2 + 1
    paths = [os.path.join(directory, f"quorum{i}.bin") for i in range(nodes)]
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for p in paths]
    buf = b"\x5a" * nbytes
    start = threading.Barrier(nodes + 1)
    finish = threading.Barrier(nodes + 1)
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * nodes

    def writer(i: int) -> None:
        try:
            for r in range(reps):
                start.wait()
                t0 = time.perf_counter()
                os.pwrite(fds[i], buf, r * nbytes)
                os.fdatasync(fds[i])
                spans[i] = (t0, time.perf_counter())
                finish.wait()
        except BaseException:  # a failed write: the caller's next wait raises BrokenBarrierError
            start.abort()
            finish.abort()
            raise

    times = []
    try:
        for fd in fds:
            os.posix_fallocate(fd, 0, nbytes * reps)
            os.fsync(fd)
        threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(nodes)]
        for t in threads:
            t.start()
        for _ in range(reps):
            start.wait()
            finish.wait()
            first = min(s for s, _ in spans)
            times.append(sorted(e for _, e in spans)[majority - 1] - first)
        for t in threads:
            t.join(10)
    finally:
        for fd, p in zip(fds, paths):
            os.close(fd)
            os.unlink(p)
    return statistics.median(times)


#: the echo server of loopback_rtt_s: a process of its own, blocking in recv as a server waits for a request
_ECHO = r"""
import socket, sys
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = conn.recv(64)
    if not d:
        break
    conn.sendall(d)
"""


def loopback_rtt_s(reps: int = 2000) -> float:
    """Median round trip of a 64-byte message over loopback TCP (TCP_NODELAY) to an echo server in a
    process of its own, as the round trip between two of the system's processes (it was a thread of
    the calling process; on a quiet machine the two agree). On this VM it is bimodal: about 0.013 ms
    while the CPUs are busy and 0.04-0.06 ms when they idle between messages (waking an idle CPU);
    the peers benchmark takes the median over its rounds (docs/performance.md)."""
    echo = subprocess.Popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(echo.stdout.readline())  # type: ignore[union-attr]
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg = b"x" * 64
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            c.sendall(msg)
            got = 0
            while got < 64:
                got += len(c.recv(64 - got))
            times.append(time.perf_counter() - t0)
        c.close()
        echo.wait(10)
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait()
    return statistics.median(times)


# --- the writer ------------------------------------------------------------------------------

def frame_batches(first: int, batch: int, size: int, count: int) -> list[tuple[int, bytes]]:
    body = b"\xab" * size
    out = []
    t = first
    for _ in range(count):
        out.append((t, b"".join(encode_record(x, OP_DATA, body) for x in range(t, t + batch))))
        t += batch
    return out


async def run_shape(qjm: QuorumJournalManager, first: int, batch: int, size: int,
                    seconds: float, max_syncs: int) -> tuple[list[float], int, float, int]:
    """Write one segment of this shape for about ``seconds``; returns latencies, txns, elapsed, next txid."""
    # enough pre-framed batches for the time budget (about 1,500 syncs/s or 400,000 txns/s at most)
    count = min(max_syncs, int(seconds * min(1500, 400000 / batch)) + 20)
    batches = frame_batches(first, batch, size, count)
    stream = await qjm.start_log_segment(first)
    lat: list[float] = []
    t_start = time.perf_counter()
    deadline = t_start + seconds
    txns = 0
    last = first - 1
    for t, data in batches:
        stream.write_raw(data, t, batch)
        stream.mark()
        t0 = time.perf_counter()
        await stream.sync()
        t1 = time.perf_counter()
        lat.append(t1 - t0)
        txns += batch
        last = t + batch - 1
        if t1 > deadline and len(lat) >= 20:
            break
    elapsed = time.perf_counter() - t_start
    await qjm.finalize_log_segment(first, last)
    return lat, txns, elapsed, last + 1


async def run_shape_window(qjm: QuorumJournalManager, first: int, batch: int, size: int,
                           seconds: float, window: int) -> tuple[list[float], int, float, int]:
    """Like :func:`run_shape` but with up to ``window`` syncs in flight (group commit)."""
    count = int(seconds * min(3000, 800000 / batch)) + window
    batches = frame_batches(first, batch, size, count)
    stream = await qjm.start_log_segment(first)
    lat: list[float] = []
    inflight: list[tuple[float, asyncio.Future]] = []
    t_start = time.perf_counter()
    deadline = t_start + seconds
    txns = 0
    last = first - 1

    async def reap_one() -> None:
        t0, fut = inflight.pop(0)
        await fut
        lat.append(time.perf_counter() - t0)
    for t, data in batches:
        stream.write_raw(data, t, batch)
        stream.mark()
        inflight.append((time.perf_counter(), asyncio.ensure_future(stream.sync())))
        txns += batch
        last = t + batch - 1
        if len(inflight) >= window:
            await reap_one()
        if time.perf_counter() > deadline and len(lat) >= 20:
            break
    while inflight:
        await reap_one()
    elapsed = time.perf_counter() - t_start
    await qjm.finalize_log_segment(first, last)
    return lat, txns, elapsed, last + 1


async def bench(args: argparse.Namespace, uri: str, jns: list, edits_root: str) -> list[str]:
    settings = QJMSettings().with_overrides(write_txns_timeout_ms=20000)
    qjm = QuorumJournalManager(uri, settings=settings)
    lines: list[str] = []
    try:
        await qjm.format(NamespaceInfo(777, "bench"))
        await qjm.recover_unfinalized_segments()
        rtt = loopback_rtt_s()
        lines.append(f"loopback round trip p50: {rtt * 1e6:.0f} us")
        header = (f"{'batch':>6} {'size':>5} | {'p50 ms':>7} {'p99 ms':>7} {'floor ms':>8} "
                  f"{'p50/floor':>9} | {'txns/s':>9} {'MB/s':>6} | {'floor txns/s':>12} {'ratio':>6}")
        lines.append(header)
        lines.append("-" * len(header))
        print("\n".join(lines), flush=True)
        txid = 1
        results = {}
        for batch, size in SHAPES:
            nbytes = batch * (size + RECORD_OVERHEAD)
            floor = fdatasync_floor_s(edits_root, nbytes, 30) + rtt
            lat, txns, elapsed, txid = await run_shape(qjm, txid, batch, size, args.seconds, 100000)
            p50, p99 = pct(lat, 50), pct(lat, 99)
            tps = txns / elapsed
            floor_tps = batch / floor
            mbs = txns * size / elapsed / 1e6
            results[(batch, size)] = (p50, floor, tps)
            line = (f"{batch:>6} {size:>5} | {p50 * 1e3:7.2f} {p99 * 1e3:7.2f} {floor * 1e3:8.2f} "
                    f"{p50 / floor:9.2f} | {tps:9,.0f} {mbs:6.1f} | {floor_tps:12,.0f} {tps / floor_tps:6.2f}")
            lines.append(line)
            print(line, flush=True)

        # group commit: several syncs in flight (a lagging JournalNode coalesces its queue)
        lines.append("")
        lines.append(f"with {args.window} syncs in flight (group commit):")
        print(lines[-1], flush=True)
        for batch, size in [(100, 100), (1000, 100)]:
            nbytes = batch * (size + RECORD_OVERHEAD)
            floor = fdatasync_floor_s(edits_root, nbytes, 30) + rtt
            lat, txns, elapsed, txid = await run_shape_window(qjm, txid, batch, size, args.seconds,
                                                              args.window)
            tps = txns / elapsed
            results[("window", batch, size)] = tps
            line = (f"{batch:>6} {size:>5} | {pct(lat, 50) * 1e3:7.2f} {pct(lat, 99) * 1e3:7.2f} "
                    f"{floor * 1e3:8.2f} {'':>9} | {tps:9,.0f} {txns * size / elapsed / 1e6:6.1f} | "
                    f"{batch / floor:12,.0f} {tps / (batch / floor):6.2f}")
            lines.append(line)
            print(line, flush=True)

        # one JournalNode stopped with SIGSTOP: commit latency must not change
        healthy = {}
        stopped = {}
        for batch, size in [(1, 100), (100, 100)]:
            lat, _, _, txid = await run_shape(qjm, txid, batch, size, args.seconds, 100000)
            healthy[(batch, size)] = pct(lat, 50)
        victim = jns[2]
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            for batch, size in [(1, 100), (100, 100)]:
                lat, _, _, txid = await run_shape(qjm, txid, batch, size, args.seconds, 100000)
                stopped[(batch, size)] = (pct(lat, 50), pct(lat, 99))
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        lines.append("")
        lines.append("one of three JournalNodes stopped (SIGSTOP):")
        for k in [(1, 100), (100, 100)]:
            p50s, p99s = stopped[k]
            line = (f"  batch {k[0]:>4} x {k[1]} B: healthy p50 {healthy[k] * 1e3:.2f} ms, stopped p50 "
                    f"{p50s * 1e3:.2f} ms (p99 {p99s * 1e3:.2f} ms), ratio {p50s / healthy[k]:.2f}")
            lines.append(line)
            print(line, flush=True)
        p50_1, floor_1, _ = results[(1, 100)]
        _, _, tps_1000 = results[(1000, 100)]
        lines.append("")
        lines.append(f"target p50(batch 1) <= 3x floor: {p50_1 / floor_1:.2f}x "
                     f"({'met' if p50_1 <= 3 * floor_1 else 'NOT met'})")
        lines.append(f"target batch 1000 x 100 B >= 250,000 txns/s: {tps_1000:,.0f} one sync at a time "
                     f"({'met' if tps_1000 >= 250000 else 'NOT met'}), "
                     f"{results[('window', 1000, 100)]:,.0f} with {args.window} in flight "
                     f"({'met' if results[('window', 1000, 100)] >= 250000 else 'NOT met'})")
        r = stopped[(1, 100)][0] / healthy[(1, 100)]
        lines.append(f"target SIGSTOP p50 within 1.5x of healthy: {r:.2f}x ({'met' if r <= 1.5 else 'NOT met'})")
        print("\n".join(lines[-4:]), flush=True)
    finally:
        await qjm.close(drain_timeout_ms=0)
    return lines


#: the shapes of the --nodes table: one record, a batch of 100, and batches of 1000 with syncs in flight
SCALING_SHAPES = [(1, 100, 1), (100, 100, 1), (1000, 100, 8)]


async def bench_nodes(args: argparse.Namespace, uri: str, n_nodes: int, edits_root: str) -> list[str]:
    """One row per shape for a quorum of ``n_nodes``: commit p50/p99, txns/s, and the p50's ratio to that
    quorum's floor (``quorum_flush_s``: the ``n_nodes`` writers on this one disk until a majority is durable,
    plus a loopback round trip): what the software adds as JournalNodes are added (seed 000 §performance)."""
    settings = QJMSettings().with_overrides(write_txns_timeout_ms=20000)
    qjm = QuorumJournalManager(uri, settings=settings)
    rows = []
    try:
        await qjm.format(NamespaceInfo(777, "bench"))
        await qjm.recover_unfinalized_segments()
        rtt = loopback_rtt_s()
        txid = 1
        for batch, size, window in SCALING_SHAPES:
            nbytes = batch * (size + RECORD_OVERHEAD)
            floor = quorum_flush_s(edits_root, nbytes, 30, nodes=n_nodes) + rtt
            if window == 1:
                lat, txns, elapsed, txid = await run_shape(qjm, txid, batch, size, args.seconds, 100000)
            else:
                lat, txns, elapsed, txid = await run_shape_window(qjm, txid, batch, size, args.seconds, window)
            p50, p99 = pct(lat, 50), pct(lat, 99)
            row = (f"{n_nodes:>5} {batch:>6} x {size:<4} {window:>6} | {p50 * 1e3:7.2f} {p99 * 1e3:7.2f} | "
                   f"{txns / elapsed:10,.0f} | {floor * 1e3:8.2f} {p50 / floor:8.2f}")
            rows.append(row)
            print(row, flush=True)
    finally:
        await qjm.close(drain_timeout_ms=0)
    return rows


def start_journalnodes(root: str, n: int) -> list:
    jns = []
    for i in range(n):
        d = os.path.join(root, f"jn{i}")
        jns.append(start_daemon(f"jn{i}", qjournal_argv(
            "journalnode", "--edits-dir", d, "--rpc-address", "127.0.0.1:0",
            "--http-address", "127.0.0.1:0"), log_path=os.path.join(root, f"jn{i}.log"),
            env={"QJOURNAL_LOG_LEVEL": "WARNING"}))
    return jns


def main_nodes(args: argparse.Namespace, counts: list[int]) -> int:
    """``--nodes 3,5,7``: the commit latency and rate for each quorum size, one after the other."""
    print(f"qjm_bench --nodes: load average {os.getloadavg()[0]:.1f} at start", flush=True)
    header = (f"{'nodes':>5} {'batch':>13} {'in flight':>6} | {'p50 ms':>7} {'p99 ms':>7} | {'txns/s':>10} | "
              f"{'floor ms':>8} {'p50/floor':>8}")
    print(header + "\n" + "-" * len(header), flush=True)
    for n in counts:
        root = tempfile.mkdtemp(prefix=f"qjm-bench-{n}-")
        jns = start_journalnodes(root, n)
        try:
            uri = "qjournal://" + ";".join(j.ready["rpc"] for j in jns) + "/bench"
            with asyncio.Runner(loop_factory=event_loop_factory(Configuration())) as runner:
                runner.run(bench_nodes(args, uri, n, root))
        finally:
            for j in jns:
                j.stop(5)
    print(f"load average at end {os.getloadavg()[0]:.1f}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time per shape (default 2)")
    ap.add_argument("--window", type=int, default=8, help="syncs in flight for the group-commit rows")
    ap.add_argument("--dir", default=None, help="directory for the JournalNodes (default: a temp dir)")
    ap.add_argument("--nodes", default=None, metavar="N,N,...",
                    help="instead of the full run: the commit latency for each quorum size (e.g. 3,5,7)")
    args = ap.parse_args()
    if args.nodes:
        try:
            counts = [int(x) for x in args.nodes.split(",")]
        except ValueError:
            ap.error(f"--nodes {args.nodes!r}: comma-separated JournalNode counts, e.g. 3,5,7")
        if any(n < 1 for n in counts):
            ap.error(f"--nodes {args.nodes!r}: each count must be at least 1")
        return main_nodes(args, counts)
    root = args.dir or tempfile.mkdtemp(prefix="qjm-bench-")
    jns = []
    try:
        jns = start_journalnodes(root, 3)
        uri = "qjournal://" + ";".join(j.ready["rpc"] for j in jns) + "/bench"
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = float("nan")
        print(f"qjm_bench: 3 JournalNodes on loopback, edits in {root}, load average {load:.1f}", flush=True)
        # the writer on the product's event loop (uvloop when installed), as the NameNode runs it
        with asyncio.Runner(loop_factory=event_loop_factory(Configuration())) as runner:
            print(f"writer's event loop: {type(runner.get_loop()).__module__.split('.')[0]}")
            runner.run(bench(args, uri, jns, root))
    finally:
        for j in jns:
            j.stop(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Replay of 10^7 edits: the NameNode's edits/s as its namespace grows from empty to 10^7 inodes.

Why: ``bench/replay_bench.py`` measures the replay of 10^5 edits (the target: 200,000 edits/s); a NameNode restarting
with a large namespace replays on top of millions of inodes, and the same code ran at about half that rate at
10^7 edits (issue 30). This bench shows where the rate goes as the namespace grows: the edits/s of each window of
``--window`` edits, the time the collector took (``gc.callbacks``), and the RSS.

The edits: ``bench/replay_bench.py``'s mix (mkdir, create, rename in turn, 1,000 per directory, every op with a
client id, so every edit also rebuilds a retry-cache entry; 10^7 edits leave ~6.7 million inodes), made by the
real namespace and written once as finalized segments of 100,000 txns of a ``file://`` journal under ``--work``
(kept: 10^7 edits take a few minutes to make and ~1.5 GB). The replay is ``EditLogTailer.catch_up`` into an empty namespace, in a fresh child process (a
``--baseline-src`` tree alternates with this one, each in its own child).

Usage: ``.venv/bin/python bench/replay_scale_bench.py [--edits 10000000] [--window 1000000] [--rounds 1]
[--baseline-src DIR/src]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "src"))
if "--child" not in sys.argv:
    sys.path.insert(0, SRC)

TARGET_EDITS_PER_S = 200_000
SEGMENT_TXNS = 100_000


def log(msg: str) -> None:
    print(msg, flush=True)


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def journal_dir(work: str, edits: int) -> str:
    return os.path.join(work, f"replay-mix-{edits}")


def edit_stream():
    """``replay_bench.make_edits``'s mix, without end: mkdir, create, rename in turn, 1,000 per directory, each
    op made by the real namespace (so every one is an op the NameNode could have logged)."""
    from qjournal.namenode.namespace import CallContext, Namespace
    from qjournal.namenode.ops import encode_op
    ns = Namespace(superuser="bench")
    client_id = b"\x07" * 16
    i = 0
    while True:
        ctx = CallContext("bench", ("bench",), client_id, i, i)
        d, k = divmod(i, 1000)
        if k == 0:
            ops = ns.mkdirs(ctx, f"/r/{d}")
        elif k % 3 == 1:
            ops = ns.mkdirs(ctx, f"/r/{d}/d{k}")
        elif k % 3 == 2:
            ops = ns.create(ctx, f"/r/{d}/f{k}")
        else:
            ops = ns.rename(ctx, f"/r/{d}/f{k - 1}", f"/r/{d}/g{k}")
        for op in ops:
            yield encode_op(op)
        i += 1


def generate(work: str, edits: int) -> str:
    """Finalized segments of ``edits`` txids (segment markers included) in a formatted ``file://`` journal."""
    import asyncio

    from qjournal.config import Configuration
    from qjournal.namenode.journal_registry import open_journal
    from qjournal.namenode.ops import NO_CALL_ID, NO_CLIENT_ID, EndLogSegmentOp, StartLogSegmentOp, encode_op
    from qjournal.protocol import segment as seg
    from qjournal.protocol.messages import NamespaceInfo

    d = journal_dir(work, edits)
    done = os.path.join(d, "generated.json")
    if os.path.exists(done):
        return d
    os.makedirs(d, exist_ok=True)

    async def fmt() -> None:
        j = open_journal(f"file://{d}", Configuration())
        await j.format(NamespaceInfo(31, "CID-replay-scale"), force=True)
        await j.close()
    asyncio.run(fmt())
    cur = os.path.join(d, "current")
    t0 = time.monotonic()
    stream = edit_stream()
    txid = 1
    while txid <= edits:
        start = txid
        end = min(edits, start + SEGMENT_TXNS - 1)
        parts = [seg.encode_header()]
        for t in range(start, end + 1):
            if t == start or t == end:
                opcode, body = encode_op((StartLogSegmentOp if t == start else EndLogSegmentOp)(
                    "bench", NO_CLIENT_ID, NO_CALL_ID, 0))
            else:
                opcode, body = next(stream)
            parts.append(seg.encode_record(t, opcode, body))
        with open(os.path.join(cur, seg.segment_file_name(start, end)), "wb") as f:
            f.write(b"".join(parts))
        txid = end + 1
    with open(done, "w") as f:
        json.dump({"edits": edits, "seconds": time.monotonic() - t0}, f)
    log(f"  generated {edits:,} edits in {time.monotonic() - t0:.0f} s")
    return d


# ------------------------------------------------------------------------------------------------ the child
def child(d: str, edits: int, window: int) -> dict:
    import asyncio
    import gc

    from qjournal.config import Configuration
    from qjournal.namenode.journal_registry import open_journal
    from qjournal.namenode.namespace import Namespace
    from qjournal.namenode.retry_cache import RetryCache
    from qjournal.namenode.tailer import EditLogTailer

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    gc_ms = [0.0]
    gc_start = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gc_ms[0] += (time.perf_counter() - gc_start[0]) * 1000
    gc.callbacks.append(on_gc)
    marks: list[tuple[float, int]] = []

    async def run() -> tuple[float, int]:
        journal = open_journal(f"file://{d}", Configuration())
        tailer = EditLogTailer(Namespace(superuser="bench"), RetryCache(), asyncio.Lock(), 0, lambda: 0, 1000,
                               on_applied=lambda txid: marks.append((time.perf_counter(), txid)))
        t0 = time.perf_counter()
        marks.append((t0, 0))
        try:
            await tailer.catch_up(journal)
        finally:
            await journal.close()
        return time.perf_counter() - t0, len(tailer.namespace)
    rss0 = rss()
    took, inodes = asyncio.run(run())
    windows = []
    nxt = window
    last_t, last_x = marks[0]
    for t, x in marks:
        if x >= nxt or x == marks[-1][1]:
            windows.append(round((x - last_x) / (t - last_t)))
            last_t, last_x = t, x
            nxt = x + window
    return {"edits_per_s": edits / took, "seconds": took, "inodes": inodes, "windows": windows,
            "gc_ms": gc_ms[0], "rss_per_inode": (rss() - rss0) / max(1, inodes), "load": load()}


def run_child(src: str, d: str, edits: int, window: int) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", d, str(edits), str(window)], env=env,
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"child failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=10_000_000)
    ap.add_argument("--window", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", default="/tmp/qjournal-bench")
    ap.add_argument("--baseline-src", default="", help="a tree to alternate with (git archive <commit> src)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child[0], int(args.child[1]), int(args.child[2]))), flush=True)
        return 0
    log(f"# replay scale bench: {args.edits:,} edits, cpus {os.cpu_count()}, load average at start {load()}")
    d = generate(args.work, args.edits)
    trees = [("this tree", SRC)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])
    for r in range(args.rounds):
        for label, src in trees:
            res = run_child(src, d, args.edits, args.window)
            log(f"  {label}: {res['edits_per_s']:,.0f} edits/s ({res['seconds']:.1f} s, {res['inodes']:,} inodes, "
                f"{res['edits_per_s'] / TARGET_EDITS_PER_S:.2f}x the {TARGET_EDITS_PER_S:,} target); per window of "
                f"{args.window:,}: {', '.join(f'{w:,}' for w in res['windows'])}; collector {res['gc_ms']:.0f} ms; "
                f"RSS {res['rss_per_inode']:.0f} B/inode (load {res['load']})")
    log(f"load average at end {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

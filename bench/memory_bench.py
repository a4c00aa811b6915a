"""Memory benchmark: NameNode bytes per inode, and checkpoint image save and load times, at 10^6 (10^7) inodes.

Why: the NameNode holds the whole namespace in memory, so bytes per inode decide how large a namespace one
process can serve (issue 17 item 5: at most 1 KiB per inode at 10^7 inodes, and an image of that namespace saved
and loaded in under 60 s each).

What it measures, each step in a fresh child process (the RSS of a process that did nothing else):

1. ``replay``: a namespace of N inodes built the way a standby or a restarting NameNode builds it, by decoding
   edit records (``ops.decode_op``) and applying them (``Namespace.apply``): 1 directory per 20 inodes, the
   others files, names like ``part-000001234.snappy.parquet``, 20 owners, 2 groups. Reported: the process's
   RSS growth per inode (what the machine pays: objects, dict tables, allocator slack), then the save time of
   its checkpoint image (``Namespace.to_image_columns`` + ``image.save_image``, as the checkpointer does) and
   the image's size. With ``--tracemalloc`` (10^6 only: it slows the build 3x) also the bytes Python objects
   hold per inode.
2. ``load``: a fresh process loads that image as the NameNode does at start-up (``image.newest_valid_image``,
   ``to_pydict``, ``Namespace.from_image_columns``): the load time, the RSS growth per inode after it, and the
   peak RSS during it.
3. ``retry cache``: the bytes per entry of the retry cache that replay fills (bounded by
   ``qjournal.namenode.retrycache.max-entries``, 10^6 by default), measured apart from the namespace.

Usage: ``.venv/bin/python bench/memory_bench.py [--inodes 1000000] [--big]`` (``--big`` adds 10^7 inodes:
about 10 minutes and ~10 GB of memory at its peak).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "src"))
if "--child" not in sys.argv:
    sys.path.insert(0, SRC)

from qjournal.namenode import image as img  # noqa: E402
from qjournal.namenode.namespace import Namespace  # noqa: E402
from qjournal.namenode.ops import (FIRST_INODE_ID, ROOT_INODE_ID, CreateOp, MkdirOp, decode_op,  # noqa: E402
                                   encode_op)
from qjournal.namenode.retry_cache import RetryCache  # noqa: E402

TARGET_BYTES_PER_INODE = 1024
TARGET_IMAGE_S = 60.0
DIR_EVERY = 20
USERS = [f"user{k:02d}" for k in range(20)]
GROUPS = ["hadoop", "supergroup"]
CLIENT_ID = b"\x05" * 16


def log(msg: str) -> None:
    print(msg, flush=True)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def ops(n: int):
    """The ``n`` ops that create the namespace (``n`` inodes besides the root), in txid order."""
    dirs = [ROOT_INODE_ID]
    cur = ROOT_INODE_ID
    base_ts = 1_790_000_000_000
    for i in range(n):
        inode = FIRST_INODE_ID + i
        user = USERS[i % len(USERS)]
        ts = base_ts + i
        if i % DIR_EVERY == 0:
            parent = dirs[(i // DIR_EVERY) // 2]  # a tree: each directory gets two subdirectories
            yield MkdirOp(user, CLIENT_ID, i, ts, inode=inode, parent=parent, name=f"dir-{i:09d}",
                          path=f"/d/{i}", perm=0o755, owner=user, group=GROUPS[i % 2], mtime=ts)
            dirs.append(inode)
            cur = inode
        else:
            yield CreateOp(user, CLIENT_ID, i, ts, inode=inode, parent=cur, name=f"part-{i:09d}.snappy.parquet",
                           path=f"/f/{i}", perm=0o644, owner=user, group=GROUPS[i % 2], mtime=ts, atime=ts)


# ------------------------------------------------------------------ children
def child_replay(n: int, out_dir: str, trace: bool) -> dict:
    if trace:
        import tracemalloc
        tracemalloc.start()
    gc.collect()
    gc.disable()  # as the tailer replays (util/proc.gc_paused)
    rss0 = rss_bytes()
    ns = Namespace(superuser="hdfs")
    t0 = time.perf_counter()
    for op in ops(n):
        opcode, body = encode_op(op)  # the record the active wrote; the standby decodes it
        ns.apply(decode_op(opcode, body))
    build_s = time.perf_counter() - t0
    gc.enable()
    gc.collect()
    if trace:  # the bytes Python objects hold (tracing inflates the RSS: measured in another child)
        return {"inodes": len(ns), "traced_per_inode": tracemalloc.get_traced_memory()[0] / n, "load": load()}
    rss1 = rss_bytes()
    res = {"inodes": len(ns), "build_s": build_s, "rss_per_inode": (rss1 - rss0) / n, "load": load()}
    t0 = time.perf_counter()
    cols = ns.image_snapshot() if hasattr(ns, "image_snapshot") else ns.to_image_columns()  # as the checkpointer
    info = img.ImageInfo(n, 1, 7, "CID-memory", ns.last_inode_id)
    path = img.save_image(out_dir, cols, info)
    res["save_s"] = time.perf_counter() - t0
    res["image_bytes"] = os.path.getsize(path)
    res["peak_rss"] = peak_rss_bytes()
    return res


def child_load(n: int, out_dir: str) -> dict:
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    if hasattr(img, "iter_image_batches"):  # the NameNode's start-up since issue 30: streamed record batches
        path = img.list_images(out_dir)[-1][1]
        info, batches = img.iter_image_batches(path)
        ns = Namespace.from_image_batches(batches, info.last_inode_id, superuser="hdfs", where=path)
    else:  # a tree before it (--src): the whole table as Python lists
        info, table, path = img.newest_valid_image(out_dir)  # type: ignore[misc]
        cols = table.to_pydict()
        del table
        ns = Namespace.from_image_columns(cols, info.last_inode_id, superuser="hdfs", where=path)
        del cols
    load_s = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_bytes()
    return {"inodes": len(ns), "load_s": load_s, "rss_per_inode": (rss1 - rss0) / n,
            "peak_rss": peak_rss_bytes(), "load": load()}


def child_retry_cache(n: int) -> dict:
    gc.collect()
    rss0 = rss_bytes()
    rc = RetryCache(max_entries=n)
    with_body = "body" in inspect.signature(rc.record_op).parameters  # a tree before record_op took it
    for op in ops(n):
        opcode, body = encode_op(op)
        if with_body:
            rc.record_op(decode_op(opcode, body), 0, body)
        else:
            rc.record_op(decode_op(opcode, body), 0)
    gc.collect()
    return {"entries": len(rc), "rss_per_entry": (rss_bytes() - rss0) / n, "load": load()}


def run_child(src: str, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], env=env,
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"child {args} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inodes", type=int, default=1_000_000)
    ap.add_argument("--big", action="store_true", help="also 10^7 inodes (~10 GB at the peak)")
    ap.add_argument("--tracemalloc", action="store_true", help="also Python's own count (slow)")
    ap.add_argument("--retry-entries", type=int, default=1_000_000)
    ap.add_argument("--src", default=SRC, help="the tree to measure (default: this one's src)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "replay":
            res = child_replay(int(rest[0]), rest[1], rest[2] == "1")
        elif kind == "load":
            res = child_load(int(rest[0]), rest[1])
        else:
            res = child_retry_cache(int(rest[0]))
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    sizes = [args.inodes] + ([10_000_000] if args.big else [])
    log(f"# memory bench of {args.src}: cpus={os.cpu_count()}, python {sys.version.split()[0]}, load average at start {load()}")
    rows = []
    for n in sizes:
        d = tempfile.mkdtemp(prefix=f"memory-bench-{n}-")
        try:
            rep = run_child(args.src, "replay", str(n), d, "0")
            if args.tracemalloc and n <= 1_000_000:
                rep["traced_per_inode"] = run_child(args.src, "replay", str(n), d, "1")["traced_per_inode"]
            log(f"  {n:>11,} inodes replayed in {rep['build_s']:.1f} s: {rep['rss_per_inode']:.0f} B/inode RSS"
                + (f", {rep['traced_per_inode']:.0f} B/inode traced" if "traced_per_inode" in rep else "")
                + f"; image saved in {rep['save_s']:.1f} s ({rep['image_bytes'] / 1e6:.0f} MB); "
                f"peak RSS {rep['peak_rss'] / 2**30:.2f} GiB (load {rep['load']})")
            lo = run_child(args.src, "load", str(n), d)
            log(f"  {n:>11,} inodes loaded from the image in {lo['load_s']:.1f} s: {lo['rss_per_inode']:.0f} B/inode RSS; "
                f"peak RSS {lo['peak_rss'] / 2**30:.2f} GiB (load {lo['load']})")
            rows.append((n, rep, lo))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    rc = run_child(args.src, "retry", str(args.retry_entries))
    log(f"  retry cache: {rc['rss_per_entry']:.0f} B/entry RSS at {rc['entries']:,} entries (load {rc['load']})")
    log(f"\nload average at end {load()}\nmarkdown:\n")
    log("| inodes | measure | measured | target | ratio | load |\n|---:|---|---:|---:|---:|---|")
    for n, rep, lo in rows:
        log(f"| {n:,} | RSS per inode, replayed | {rep['rss_per_inode']:.0f} B | {TARGET_BYTES_PER_INODE} B | "
            f"{rep['rss_per_inode'] / TARGET_BYTES_PER_INODE:.2f} | {rep['load']} |")
        if "traced_per_inode" in rep:
            log(f"| {n:,} | Python objects per inode (tracemalloc) | {rep['traced_per_inode']:.0f} B | "
                f"{TARGET_BYTES_PER_INODE} B | {rep['traced_per_inode'] / TARGET_BYTES_PER_INODE:.2f} | {rep['load']} |")
        log(f"| {n:,} | RSS per inode, loaded from the image | {lo['rss_per_inode']:.0f} B | {TARGET_BYTES_PER_INODE} B | "
            f"{lo['rss_per_inode'] / TARGET_BYTES_PER_INODE:.2f} | {lo['load']} |")
        log(f"| {n:,} | image save ({rep['image_bytes'] / 1e6:.0f} MB) | {rep['save_s']:.1f} s | {TARGET_IMAGE_S:.0f} s | "
            f"{rep['save_s'] / TARGET_IMAGE_S:.2f} | {rep['load']} |")
        log(f"| {n:,} | image load | {lo['load_s']:.1f} s | {TARGET_IMAGE_S:.0f} s | {lo['load_s'] / TARGET_IMAGE_S:.2f} "
            f"| {lo['load']} |")
        log(f"| {n:,} | peak RSS, save / load | {rep['peak_rss'] / 2**30:.2f} / {lo['peak_rss'] / 2**30:.2f} GiB | | | |")
    log(f"| {rc['entries']:,} entries | retry cache RSS per entry | {rc['rss_per_entry']:.0f} B | | | {rc['load']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

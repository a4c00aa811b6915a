"""FileJournal write benchmark: records/s and MB/s against raw ``write`` + ``fdatasync`` on the same disk.

Why: a NameNode's local edit directory is a FileJournal; every ``log_sync``
waits for it. Its cost should be the disk's, not Python's. For each record size
(100 B, 1 KiB) and each sync interval N (a sync every 1, 10, 100, 1000
records) this script measures, in the same run and on the same directory:

* floor: the same framed bytes written with one ``os.write`` and one
  ``os.fdatasync`` per group of N records (the physical limit: no framing, no
  checksums, no event loop);
* filejournal: ``stream.write`` per record (framing + CRC32C), ``mark`` and
  ``await sync()`` per group of N, through ``FileJournal.start_log_segment``.

Floor and FileJournal runs are interleaved round by round (so load from other
processes hits both alike) and the median round is reported. Ratio =
FileJournal time / floor time (1.00 = as fast as the disk allows). Targets:
ratio <= 2 at N = 1000 and <= 1.5 at N = 1.

Usage::

    .venv/bin/python bench/filejournal_bench.py [--syncs 200] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.journal.base import NamespaceInfo  # noqa: E402
from qjournal.journal.file import FileJournal  # noqa: E402
from qjournal.protocol.segment import OP_DATA, encode_header, encode_record  # noqa: E402

NS = NamespaceInfo(4242, "bench")


def floor_run(path: str, groups: list[bytes]) -> float:
    """Seconds to write + fdatasync each group (the physical floor)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_header())
        os.fsync(fd)
        t0 = time.perf_counter()
        for g in groups:
            view = memoryview(g)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
        return time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)


async def journal_run(directory: str, body: bytes, n: int, syncs: int) -> float:
    """Seconds to write ``syncs`` groups of ``n`` records through a FileJournal."""
    if os.path.exists(directory):
        shutil.rmtree(directory)
    j = FileJournal(directory)
    await j.format(NS)
    await j.recover_unfinalized_segments()
    stream = await j.start_log_segment(1)
    write, mark, sync = stream.write, stream.mark, stream.sync
    txid = 1
    t0 = time.perf_counter()
    for _ in range(syncs):
        for t in range(txid, txid + n):
            write(t, body)
        txid += n
        mark()
        await sync()
    elapsed = time.perf_counter() - t0
    assert stream.last_synced_txid == txid - 1
    await j.finalize_log_segment(1, txid - 1)
    await j.close()
    shutil.rmtree(directory)
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=200, help="syncs per measurement (default 200)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is kept (default 3)")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--max-records", type=int, default=100_000,
                    help="cap on records per measurement (bounds the N=1000 runs; default 100000)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="qj-fjbench-", dir=args.dir)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"FileJournal vs raw write+fdatasync in {base} (median of {args.rounds} interleaved rounds; "
          f"load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"{'record':>7} {'N':>5} {'syncs':>6} {'floor rec/s':>12} {'floor MB/s':>10} "
          f"{'FJ rec/s':>10} {'FJ MB/s':>8} {'ratio':>6} {'target':>7}")
    worst: list[str] = []
    try:
        for size in (100, 1024):
            body = bytes(range(256)) * (size // 256) + b"q" * (size % 256)
            rec_len = len(encode_record(1, OP_DATA, body))
            for n in (1, 10, 100, 1000):
                syncs = max(10, min(args.syncs, args.max_records // n))
                groups = []
                txid = 1
                for _ in range(syncs):
                    groups.append(b"".join(encode_record(t, OP_DATA, body) for t in range(txid, txid + n)))
                    txid += n
                floors, journals = [], []
                for _ in range(args.rounds):
                    floors.append(floor_run(os.path.join(base, "floor"), groups))
                    journals.append(asyncio.run(journal_run(os.path.join(base, "fj"), body, n, syncs)))
                f, j = statistics.median(floors), statistics.median(journals)
                records = n * syncs
                mb = records * rec_len / 1e6
                ratio = j / f
                target = {1: 1.5, 1000: 2.0}.get(n)
                mark = "" if target is None else (f"<={target}" + (" ok" if ratio <= target else " MISS"))
                if target is not None and ratio > target:
                    worst.append(f"{size}B N={n}: {ratio:.2f}x")
                print(f"{size:>6}B {n:>5} {syncs:>6} {records / f:>12,.0f} {mb / f:>10.1f} "
                      f"{records / j:>10,.0f} {mb / j:>8.1f} {ratio:>6.2f} {mark:>7}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("all targets met" if not worst else "targets missed: " + ", ".join(worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())

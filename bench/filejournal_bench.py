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

Floor and FileJournal alternate group by group within a run (so load from
other processes hits both alike); each configuration runs ``--rounds`` times
and the medians are reported. Ratio = FileJournal time / floor time (median
of the per-round ratios; 1.00 = as fast as the disk allows). Targets:
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

from qjournal.protocol.messages import NamespaceInfo  # noqa: E402
from qjournal.journalmanager.file import DEFAULT_PREALLOCATE_BYTES, FileJournal  # noqa: E402
from qjournal.protocol.segment import OP_DATA, encode_header, encode_record  # noqa: E402

NS = NamespaceInfo(4242, "bench")


async def paired_run(directory: str, body: bytes, n: int, groups: list[bytes],
                     preallocate_bytes: int) -> tuple[float, float]:
    """Seconds for the floor and for FileJournal, measured group by group in alternation.

    Each group of N records is written first to the floor file (one write +
    one fdatasync of the pre-framed bytes) and then through the FileJournal
    (N ``write`` calls, ``mark``, ``await sync()``); the two timers add up
    separately. Pairing each group this way exposes both to the same disk and
    CPU conditions, which matters on a machine shared with other jobs.
    """
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    floor_path = os.path.join(directory, "floor")
    fd = os.open(floor_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    j = FileJournal(os.path.join(directory, "fj"), preallocate_bytes=preallocate_bytes)
    await j.format(NS)
    await j.recover_unfinalized_segments()
    stream = await j.start_log_segment(1)
    write, mark, sync = stream.write, stream.mark, stream.sync
    floor_s = journal_s = 0.0
    txid = 1
    perf = time.perf_counter
    try:
        os.write(fd, encode_header())
        os.fsync(fd)
        for g in groups:
            t0 = perf()
            view = memoryview(g)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
            t1 = perf()
            for t in range(txid, txid + n):
                write(t, body)
            mark()
            await sync()
            t2 = perf()
            txid += n
            floor_s += t1 - t0
            journal_s += t2 - t1
    finally:
        os.close(fd)
    assert stream.last_synced_txid == txid - 1
    await j.finalize_log_segment(1, txid - 1)
    await j.close()
    shutil.rmtree(directory)
    return floor_s, journal_s


def write_cost_us(size: int, count: int = 100_000) -> float:
    """CPU cost of ``stream.write`` per record without any disk I/O (buffers are dropped)."""
    async def go() -> float:
        d = tempfile.mkdtemp(prefix="qj-fjcpu-")
        try:
            j = FileJournal(d)
            await j.format(NS)
            stream = await j.start_log_segment(1)
            body = b"c" * size
            best = float("inf")
            txid = 1
            for _ in range(3):
                t0 = time.perf_counter()
                for t in range(txid, txid + count):
                    stream.write(t, body)
                best = min(best, time.perf_counter() - t0)
                txid += count
                stream.mark()
                stream._ready = bytearray()  # drop the bytes: this measures CPU only
            await stream.abort()
            await j.close()
            return best / count * 1e6
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return asyncio.run(go())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=200, help="syncs per measurement (default 200)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is kept (default 3)")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--max-records", type=int, default=100_000,
                    help="cap on records per measurement (bounds the N=1000 runs; default 100000)")
    ap.add_argument("--preallocate-bytes", type=int, default=DEFAULT_PREALLOCATE_BYTES,
                    help="the FileJournal's preallocation step (qjournal.file-journal.preallocate.bytes; "
                         "0: off; the floor always appends)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="qj-fjbench-", dir=args.dir)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"FileJournal vs raw write+fdatasync in {base} (floor and FileJournal alternate per sync; median of {args.rounds} rounds; "
          f"load average {load:.1f} on {os.cpu_count()} cores; FileJournal preallocation "
          f"{args.preallocate_bytes} bytes, the floor appends)")
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
                floors, journals, ratios = [], [], []
                for _ in range(args.rounds):
                    fl, jo = asyncio.run(paired_run(os.path.join(base, "run"), body, n, groups,
                                                    args.preallocate_bytes))
                    floors.append(fl)
                    journals.append(jo)
                    ratios.append(jo / fl)
                f, j = statistics.median(floors), statistics.median(journals)
                records = n * syncs
                mb = records * rec_len / 1e6
                ratio = statistics.median(ratios)
                target = {1: 1.5, 1000: 2.0}.get(n)
                mark = "" if target is None else (f"<={target}" + (" ok" if ratio <= target else " MISS"))
                if target is not None and ratio > target:
                    worst.append(f"{size}B N={n}: {ratio:.2f}x")
                print(f"{size:>6}B {n:>5} {syncs:>6} {records / f:>12,.0f} {mb / f:>10.1f} "
                      f"{records / j:>10,.0f} {mb / j:>8.1f} {ratio:>6.2f} {mark:>7}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"stream.write CPU cost (no I/O, best of 3 x 100,000): {write_cost_us(100):.2f} us per 100-byte "
          f"record, {write_cost_us(1024):.2f} us per 1 KiB record")
    print("all targets met" if not worst else "targets missed: " + ", ".join(worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())

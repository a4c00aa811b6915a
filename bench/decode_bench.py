"""Micro-benchmark of segment decoding: the compiled kernels against the Python reference, per core.

Why: issue 14 asks for vectorised decoding and its rate in edits/s per core;
the pipeline's checkpoint can only beat the NameNode's replay if decoding
itself is far faster than replay. This script measures, in one process on one
generated history (kept under ``--work`` so reruns skip the generation):

* floor       reading every segment byte (``open().read()``, page cache warm),
* python      ``decode_segment_batches(..., compiled=False)``: the scan and
              ``decode_columns`` (the reference path),
* compiled    the same call with the numba kernels: the first call's time (JIT
              compile into a fresh ``NUMBA_CACHE_DIR``) separately, then warm
              runs; a second process reports the time to load the kernels from
              that cache, as a Spark worker with a warm cache pays it,
* framing     the compiled framing alone (header, lengths, txids, CRC32C),

each as records/s of CPU time of this single-threaded process (= per core),
and the ratio compiled / python. Run it alone on the machine when possible, and
quote ``uptime``'s load average with the numbers.

Run: ``PYTHONPATH=src .venv/bin/python bench/decode_bench.py`` (10^6 txids);
``--txns 100000`` for a quick run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# a fresh cache, so the first compiled call below is a real compile (set before numba is imported)
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="qjournal-decode-bench-numba-")
atexit.register(shutil.rmtree, os.environ["NUMBA_CACHE_DIR"], True)

import argparse  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from histories import JID, NODE, history, segments  # noqa: E402
from qjournal.pipeline import decode as dec  # noqa: E402

_LOAD_PROBE = """
import time, sys
t = time.process_time()
from qjournal.pipeline import vdecode
u = time.process_time()
vdecode.frame_clean(open(sys.argv[1], 'rb').read(), int(sys.argv[2]), int(sys.argv[3]), 1 << 20)
print(u - t, time.process_time() - u)
"""


def _timed(fn) -> tuple[float, float, int]:
    """``(cpu s, wall s, records)`` of one call."""
    c, w = time.process_time(), time.monotonic()
    n = fn()
    return time.process_time() - c, time.monotonic() - w, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--txns", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--roll-every-txns", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3, help="warm runs of the compiled path (best is kept)")
    p.add_argument("--work", default="/tmp/qjournal-decode-bench")
    args = p.parse_args()
    segs = segments(history(args.work, args.seed, args.txns, args.roll_every_txns))
    blobs: dict[str, bytes] = {}

    def read_all() -> int:
        total = 0
        for path, _s, _e in segs:
            with open(path, "rb") as f:
                blobs[path] = f.read()
            total += len(blobs[path])
        return total

    read_all()  # page cache warm
    size = read_all()

    def floor() -> int:
        return read_all() and args.txns

    def decode(compiled: bool, only: slice | None = None) -> int:
        rows = 0
        for path, s, e in segs[only or slice(None)]:
            for b in dec.decode_segment_batches(JID, NODE, s, e, blobs[path], compiled=compiled):
                rows += b.num_rows
        return rows

    def frame() -> int:
        return sum(len(dec.frame_segment(JID, NODE, s, e, blobs[path]).txids) for path, s, e in segs)

    results: dict[str, tuple[float, float, int]] = {"floor (read bytes)": _timed(floor)}
    first = _timed(lambda: decode(True, slice(0, 1)))
    results["python reference"] = _timed(lambda: decode(False))
    results["compiled (warm)"] = min((_timed(lambda: decode(True)) for _ in range(args.repeats)),
                                     key=lambda r: r[0])
    results["compiled framing only"] = min((_timed(frame) for _ in range(args.repeats)), key=lambda r: r[0])
    probe = subprocess.run([sys.executable, "-c", _LOAD_PROBE, segs[0][0], str(segs[0][1]), str(segs[0][2])],
                           capture_output=True, text=True, check=True, env=os.environ)
    load = os.getloadavg()
    print(f"history: {args.txns:,} txids in {len(segs)} segments, {size / 1e6:,.0f} MB "
          f"({size / args.txns:.0f} bytes/record); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    imported, loaded = (float(x) for x in probe.stdout.split())
    print(f"first compiled call (JIT compile, one segment): {first[0]:.2f} s CPU; in a new process: "
          f"import {imported:.2f} s CPU, then the framing kernels from the cache {loaded:.2f} s CPU")
    for label, (cpu, wall, n) in results.items():
        print(f"  {label:24s} {cpu:7.2f} s CPU {wall:7.2f} s wall  {n / cpu:14,.0f} records/s per core")
    ratio = results["python reference"][0] / results["compiled (warm)"][0]
    floor_ratio = results["compiled (warm)"][0] / max(results["floor (read bytes)"][0], 1e-9)
    print(f"compiled / python: x{ratio:.1f} faster; compiled costs x{floor_ratio:.1f} the floor's CPU")


if __name__ == "__main__":
    main()

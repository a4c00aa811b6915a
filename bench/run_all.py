"""Run every benchmark in sequence (``make bench``), each with its documented default settings.

Why: one command that regenerates every number in docs/performance.md on the
machine at hand. Each benchmark prints its own ratios against the physical
floors it measures in the same run; this script only runs them in order and
reports which failed. ``--quick`` uses short settings for a smoke run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

#: (script, full arguments, quick arguments)
BENCHES = [
    ("rpc_bench.py", [], ["--quick"]),
    ("filejournal_bench.py", [], ["--syncs", "50", "--rounds", "1"]),
    ("jn_write.py", [], ["--batches", "50"]),
    ("qjm_bench.py", [], ["--seconds", "0.5"]),
    ("namenode_bench.py", [], ["--seconds", "1"]),
    ("failover_bench.py", [], ["--rounds", "3", "--timeouts", "2000"]),
    ("pipeline_bench.py", [], ["--sizes", "100000"]),
    ("resync_bench.py", [], ["--gb", "0.05", "--segment-mb", "10", "--rejoins", "1"]),
    ("tail_bench.py", [], ["--seconds", "3"]),
    ("secure_bench.py", [], ["--seconds", "1", "--rounds", "1"]),
    ("replay_bench.py", [], ["--edits", "20000", "--rounds", "1"]),
    ("memory_bench.py", [], ["--inodes", "100000", "--retry-entries", "100000"]),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short settings (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated script names to run")
    args = ap.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    failed: list[str] = []
    for script, full, quick in BENCHES:
        if only and script not in only and script.removesuffix(".py") not in only:
            continue
        cmd = [sys.executable, os.path.join(HERE, script), *(quick if args.quick else full)]
        print(f"\n=== {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call(cmd)
        print(f"=== {script}: exit {rc} after {time.monotonic() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    print("\nall benchmarks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())

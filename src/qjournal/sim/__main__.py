"""``python -m qjournal.sim``: run, replay, minimise and soak simulated seeds (journal and whole cluster).

Why a command: a failing seed printed by a test or a soak must be replayable
by pasting one line. Usage::

    python -m qjournal.sim --seed 42 --steps 200            # one run (replay)
    python -m qjournal.sim --seed 42 --steps 200 --faults drop=0,jn_crash=0.1
    python -m qjournal.sim soak --seeds 2000 [--first 0] [--steps 150] [--jobs 2]
    python -m qjournal.sim cluster --seed 7 [--steps 40] [--fencing shell] [--faults nn_crash=0] [--observer on]
    python -m qjournal.sim cluster-soak --seeds 10000 [--jobs 2] [--observer on]    # the whole HA cluster
    (every run command also takes --disk-faults on|off: the JournalNodes' disks fail; default: half the seeds)

A failing run is minimised (fewer steps, then fewer fault kinds) and the
smallest failing run is printed with its replay command and its history.

String hashing is randomised per process unless ``PYTHONHASHSEED`` is set; the
command re-executes itself with ``PYTHONHASHSEED=0`` so that a replay in a new
process iterates any (accidental) set of strings in the same order.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
import traceback

from qjournal.sim.faults import FaultConfig, HAFaults
from qjournal.sim.ha_workload import HAOptions, run_ha_seed
from qjournal.sim.workload import SimOptions, minimise, run_seed


def _ensure_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0" and not os.environ.get("QJOURNAL_SIM_NO_REEXEC"):
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, "-m", "qjournal.sim", *sys.argv[1:]], env)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m qjournal.sim", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="seed of the run to replay")
    p.add_argument("--steps", type=int, default=150, help="director steps per run")
    p.add_argument("--nodes", type=int, default=3, choices=[3, 5], help="JournalNodes")
    p.add_argument("--faults", default=None,
                   help="fault probabilities kind=p,... ('none' = fault-free); see qjournal.sim.faults")
    p.add_argument("--disk-faults", choices=["on", "off"], default=None, dest="disk_faults",
                   help="the JournalNodes' disks fail (default: chosen by the seed, half the runs)")
    p.add_argument("--no-minimise", action="store_true", help="do not minimise a failing run")
    p.add_argument("--history", action="store_true", help="print the whole history of the run")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("soak", help="run many seeds and report counts")
    s.add_argument("--seeds", type=int, default=2000)
    s.add_argument("--first", type=int, default=0)
    s.add_argument("--steps", type=int, default=150, dest="soak_steps")
    s.add_argument("--jobs", type=int, default=1, help="worker processes")
    s.add_argument("--disk-faults", choices=["on", "off"], default=None, dest="soak_disk_faults",
                   help="every seed with (on) or without (off) disk failures (default: chosen by each seed)")
    s.add_argument("--report", default=None, help="write the soak summary as JSON to this file")
    s.add_argument("--seed-wall-limit-s", type=int, default=300,
                   help="a seed running longer (wall clock) is a failing seed: a spin or a hang")
    c = sub.add_parser("cluster", help="one whole-cluster run (NameNodes, ZKFCs, ZooKeeper, JournalNodes)")
    c.add_argument("--seed", type=int, default=0, dest="cluster_seed")
    c.add_argument("--steps", type=int, default=40, dest="cluster_steps")
    c.add_argument("--fencing", choices=["pidfence", "shell"], default="", help="default: chosen by the seed")
    c.add_argument("--observer", choices=["on", "off"], default=None,
                   help="run the observer NameNode nn3 (default: chosen by the seed, half the runs)")
    c.add_argument("--clock-jumps", choices=["on", "off"], default=None, dest="clock_jumps",
                   help="NameNode wall clocks jump (default: chosen by the seed, half the runs)")
    c.add_argument("--disk-faults", choices=["on", "off"], default=None, dest="cluster_disk_faults",
                   help="the JournalNodes' disks fail (default: chosen by the seed, half the runs)")
    c.add_argument("--faults", default=None, dest="cluster_faults",
                   help="weights kind=w,... over the defaults ('none' = fault-free); see HAFaults")
    c.add_argument("--history", action="store_true", dest="cluster_history")
    cs = sub.add_parser("cluster-soak", help="many whole-cluster seeds")
    cs.add_argument("--seeds", type=int, default=10000)
    cs.add_argument("--first", type=int, default=0)
    cs.add_argument("--steps", type=int, default=40, dest="soak_steps")
    cs.add_argument("--jobs", type=int, default=1, help="worker processes")
    cs.add_argument("--observer", choices=["on", "off"], default=None, dest="soak_observer",
                    help="every seed with (on) or without (off) the observer nn3 (default: chosen by each seed)")
    cs.add_argument("--disk-faults", choices=["on", "off"], default=None, dest="soak_disk_faults",
                    help="every seed with (on) or without (off) disk failures (default: chosen by each seed)")
    cs.add_argument("--report", default=None, help="write the soak summary as JSON to this file")
    cs.add_argument("--seed-wall-limit-s", type=int, default=300,
                    help="a seed running longer (wall clock) is a failing seed: a spin or a hang")
    return p


def _on_off(value: str | None) -> bool | None:
    return None if value is None else value == "on"


def _run_one(args) -> int:
    config = FaultConfig.parse(args.faults)
    opts = SimOptions(seed=args.seed, steps=args.steps, nodes=args.nodes, faults=config,
                      disk_faults=_on_off(args.disk_faults))
    t0 = time.monotonic()
    result = run_seed(opts)
    dt = time.monotonic() - t0
    print(result.summary() + f" wall={dt:.2f}s")
    if args.history:
        print(result.history.format())
    if not result.violations:
        return 0
    for v in result.violations:
        print(f"{'VIOLATION' if v in result.unexplained else 'KNOWN-BUG'} {v}")
    if not result.failed:
        return 0
    if not args.no_minimise:
        small = minimise(opts, result)
        print(f"smallest failing run: {small.options.replay_command()}")
        for v in small.violations:
            print(f"  VIOLATION {v}")
        print(small.explain())
    return 1


class _SeedWallLimit(KeyboardInterrupt):
    """Raised by the watchdog's SIGALRM in a seed that overran its wall-clock limit. A KeyboardInterrupt,
    so neither the code under test (``except Exception``) nor asyncio's handlers swallow it."""


def _wall_limited(seed: int, limit_s: int, run):
    """``run()`` under a wall-clock watchdog: a seed that spins or hangs becomes a failing seed with the
    stack where it was (the second 10,000-seed soak sat for 20 minutes on one that spun)."""
    def on_alarm(signum, frame):
        signal.alarm(max(1, limit_s // 10))  # the teardown of the interrupted run gets a little time too
        where = "".join(traceback.format_stack(frame)[-8:])
        raise _SeedWallLimit(f"seed {seed} ran longer than {limit_s} s of wall clock; it was in:\n{where}")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit_s)
    try:
        return run()
    except _SeedWallLimit as e:
        return seed, [f"[wall_limit] {e}"], {"seed_wall_limit": 1}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _soak_worker(item):
    seed, steps, nodes, limit_s, disk_faults = item

    def run():
        opts = SimOptions(seed=seed, steps=steps, nodes=nodes, faults=FaultConfig(), disk_faults=disk_faults)
        r = run_seed(opts)
        return seed, [str(v) for v in r.unexplained], r.counts()
    return _wall_limited(seed, limit_s, run)


def _cluster_worker(item):
    seed, steps, limit_s, observer, disk_faults = item
    logging.disable(logging.CRITICAL)   # the daemons' logs of a soak go nowhere; the checker judges

    def run():
        r = run_ha_seed(HAOptions(seed=seed, steps=steps, observer=observer, disk_faults=disk_faults))
        return seed, [str(v) for v in r.unexplained], r.counts()
    return _wall_limited(seed, limit_s, run)


def _soak_loop(args, worker, items) -> tuple[dict, list]:
    """Run ``worker`` over ``items`` (in ``--jobs`` processes), print failing seeds, write reports."""
    totals: dict[str, int] = {}
    failing: list[tuple[int, list[str]]] = []
    t0 = time.monotonic()

    def take(i: int, seed: int, viols: list[str], counts: dict) -> None:
        _accumulate(totals, counts)
        if viols:
            failing.append((seed, viols))
            print(f"seed {seed}: {len(viols)} violation(s): {viols[0]}", flush=True)
        if i % 100 == 0:
            print(f"... {i}/{len(items)} seeds, {len(failing)} failing", flush=True)
            _write_report(args, i, totals, failing, t0, partial=True)
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            for i, (seed, viols, counts) in enumerate(pool.imap(worker, items, chunksize=4), 1):
                take(i, seed, viols, counts)
    else:
        for i, item in enumerate(items, 1):
            take(i, *worker(item))
    summary = _write_report(args, len(items), totals, failing, t0, partial=False)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return summary, failing


def _soak(args) -> int:
    seeds = list(range(args.first, args.first + args.seeds))
    disk_faults = _on_off(args.soak_disk_faults)
    _, failing = _soak_loop(args, _soak_worker, [(s, args.soak_steps, 5 if s % 4 == 3 else 3,
                                                  args.seed_wall_limit_s, disk_faults) for s in seeds])
    if failing:
        seed = failing[0][0]
        nodes = 5 if seed % 4 == 3 else 3
        opts = SimOptions(seed=seed, steps=args.soak_steps, nodes=nodes, faults=FaultConfig(), disk_faults=disk_faults)
        small = minimise(opts, run_seed(opts))
        print(f"first failing seed minimised: {small.options.replay_command()}")
        print(small.explain())
    return 1 if failing else 0


def _run_cluster(args) -> int:
    opts = HAOptions(seed=args.cluster_seed, steps=args.cluster_steps, faults=HAFaults.parse(args.cluster_faults),
                     fencing=args.fencing, observer=_on_off(args.observer), clock_jumps=_on_off(args.clock_jumps),
                     disk_faults=_on_off(args.cluster_disk_faults))
    logging.disable(logging.CRITICAL)   # the daemons' own logs: the history tells the story
    t0 = time.monotonic()
    r = run_ha_seed(opts)
    print(r.summary() + f" wall={time.monotonic() - t0:.2f}s")
    if args.cluster_history:
        print(r.history.format())
    if r.violations:
        print(r.explain())
    return 1 if r.violations else 0


def _cluster_soak(args) -> int:
    seeds = range(args.first, args.first + args.seeds)
    observer, disk_faults = _on_off(args.soak_observer), _on_off(args.soak_disk_faults)
    _, failing = _soak_loop(args, _cluster_worker, [(s, args.soak_steps, args.seed_wall_limit_s, observer, disk_faults)
                                                    for s in seeds])
    if failing:
        opts = HAOptions(seed=failing[0][0], steps=args.soak_steps, observer=observer, disk_faults=disk_faults)
        print(f"first failing seed: {opts.replay_command()}")
        print(run_ha_seed(opts).explain())
    return 1 if failing else 0


def _write_report(args, seeds_run: int, totals: dict, failing: list, t0: float, partial: bool) -> dict:
    """The soak summary; also written to ``--report`` (every 100 seeds while running)."""
    summary = {"seeds_run": seeds_run, "first_seed": args.first, "steps_per_seed": args.soak_steps,
               "partial": partial, "failing_seeds": [s for s, _ in failing],
               "wall_s": round(time.monotonic() - t0, 1), "counts": dict(sorted(totals.items()))}
    if args.report:
        with open(args.report, "w") as f:
            json.dump(summary, f, indent=2, sort_keys=True)
    return summary


def _accumulate(totals: dict[str, int], counts: dict[str, int]) -> None:
    for k, v in counts.items():
        totals[k] = totals.get(k, 0) + v


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.faults is not None:
        try:
            FaultConfig.parse(args.faults)
        except ValueError as e:
            parser.error(str(e))
    if args.command == "soak":
        return _soak(args)
    if args.command == "cluster":
        try:
            HAFaults.parse(args.cluster_faults)
        except ValueError as e:
            parser.error(str(e))
        return _run_cluster(args)
    if args.command == "cluster-soak":
        return _cluster_soak(args)
    return _run_one(args)


if __name__ == "__main__":
    _ensure_hash_seed()
    sys.exit(main())

"""``python -m qjournal.chaos``: one real-process chaos session from a seed.

Why a command: a chaos session that found a violation must be re-runnable with
the same fault schedule by pasting one line::

    python -m qjournal.chaos --duration-s 60 --seed 7 [--nodes 3] [--workdir DIR]     # the journal
    python -m qjournal.chaos cluster --duration-s 60 --seed 7 [--workdir DIR]         # the whole HA cluster
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from qjournal.chaos.cluster import run_cluster_chaos
from qjournal.chaos.driver import main_session
from qjournal.chaos.harness import run_chaos


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qjournal.chaos", description=__doc__.splitlines()[0])
    p.add_argument("--duration-s", type=float, default=30.0, help="length of the faulty phase")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    p.add_argument("--nodes", type=int, default=3, choices=[3, 5], help="JournalNodes")
    p.add_argument("--workdir", default=None, help="keep the run's files here (default: a temp dir)")
    sub = p.add_subparsers(dest="command")
    c = sub.add_parser("cluster", help="the whole HA cluster: ZooKeeper, JournalNodes, NameNodes, ZKFCs")
    c.add_argument("--duration-s", type=float, default=60.0, dest="cluster_duration_s")
    c.add_argument("--seed", type=int, default=0, dest="cluster_seed")
    c.add_argument("--workdir", default=None, dest="cluster_workdir")
    c.add_argument("--secure", action="store_true",
                   help="on a secure cluster (cluster up --secure: TLS, authorization, ZooKeeper TLS and ACLs)")
    args = p.parse_args(argv)
    if args.command == "cluster":
        return main_session(asyncio.run(run_cluster_chaos(args.cluster_duration_s, args.cluster_seed,
                                                          args.cluster_workdir, args.secure)))
    return main_session(asyncio.run(run_chaos(duration_s=args.duration_s, seed=args.seed, nodes=args.nodes,
                                              workdir=args.workdir)))


if __name__ == "__main__":
    sys.exit(main())

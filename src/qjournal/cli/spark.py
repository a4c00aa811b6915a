"""``qjournal spark up|down|status [--workers N] [--run-dir D]``: a local Spark standalone cluster.

Why a subcommand: the pipeline's cluster mode needs a master and workers to try
against, and the pip-installed pyspark has no ``sbin`` scripts to start them.
See :mod:`qjournal.localcluster.spark`.
"""

from __future__ import annotations

import argparse

from qjournal.cli._daemon import guarded
from qjournal.localcluster.spark import SparkCluster

DEFAULT_RUN_DIR = "run/spark"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("spark", description="A local Spark standalone master and workers started from "
                                                   "the pyspark package's jars.")
    sub = p.add_subparsers(dest="spark_command", metavar="ACTION")

    def add(name: str, help_: str, func):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--run-dir", default=DEFAULT_RUN_DIR, help=f"run directory (default {DEFAULT_RUN_DIR})")
        sp.set_defaults(func=func)
        return sp

    up = add("up", "start a master and N workers; wait until the workers registered", _up)
    up.add_argument("--workers", type=int, default=1, metavar="N", help="how many workers (default 1)")
    up.add_argument("--worker-cores", type=int, default=None, metavar="N",
                    help="cores each worker offers (default: all of the machine's)")
    up.add_argument("--worker-memory", default="2g", help="memory each worker offers (default 2g)")
    up.add_argument("--hide", action="append", default=[], metavar="DIR",
                    help="run each worker in its own mount namespace with DIR covered by an empty tmpfs "
                         "(repeatable; root and unshare needed): the executors cannot read the driver's files there")
    add("down", "stop the workers and the master; verify nothing is left running", _down)
    add("status", "processes, the master's workers and applications", _status)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


_guard = guarded("spark")


@_guard
def _up(args):
    c = SparkCluster(args.run_dir, workers=args.workers, worker_cores=args.worker_cores,
                     worker_memory=args.worker_memory, hide=args.hide)
    c.up()
    print(c.format_status())
    print(f"\nrun: qjournal pipeline all --master {c.state.master_url} --journal qjournal://... --out <shared dir>"
          f"\nstop: qjournal spark down --run-dir {args.run_dir}")


@_guard
def _down(args):
    SparkCluster.open(args.run_dir).down()


@_guard
def _status(args):
    print(SparkCluster.open(args.run_dir).format_status())

"""``qjournal cluster up|down|status|kill NAME|restart NAME|logs NAME [--run-dir DIR]``: a local HA cluster.

Why a subcommand: starting ZooKeeper, three JournalNodes, two NameNodes and two
ZKFCs by hand takes a dozen commands and a configuration file; this does it in
one, keeps everything in one run directory, and tears it down leaving nothing
running. See :mod:`qjournal.localcluster.launcher`.
"""

from __future__ import annotations

import argparse
import signal
import sys

from qjournal.cli._daemon import guarded
from qjournal.localcluster.launcher import LocalCluster


DEFAULT_RUN_DIR = "run/cluster"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cluster")
    sub = p.add_subparsers(dest="cluster_command", metavar="ACTION")

    def add(name: str, help_: str, func, needs_name: bool = False):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--run-dir", default=DEFAULT_RUN_DIR, help=f"run directory (default {DEFAULT_RUN_DIR})")
        if needs_name:
            sp.add_argument("name", help="process name (zk1, jn1..jn3, nn1, nn2, observers nn3..., zkfc-nn1, zkfc-nn2)")
        sp.set_defaults(func=func)
        return sp

    up = add("up", "start ZooKeeper, 3 JournalNodes, 2 NameNodes, 2 ZKFCs", _up)
    up.add_argument("--zk-servers", type=int, default=1, choices=[1, 3])
    up.add_argument("--session-timeout-ms", type=int, default=2000)
    up.add_argument("--fresh", action="store_true", help="wipe the data of a stopped cluster in --run-dir first")
    up.add_argument("--observers", type=int, default=0, metavar="N",
                    help="also start N observer NameNodes (nn3...; no ZKFC), serving the clients' reads")
    up.add_argument("--secure", action="store_true",
                    help="a CA and a certificate per role, mutual TLS (RPC, HTTPS, ZooKeeper), service-level "
                         "authorization and ZooKeeper digest ACLs (docs/security.md)")
    add("down", "stop everything and verify nothing is left running", _down)
    add("status", "table of processes: pid, alive, role/HA state, health, last applied txid, address", _status)
    k = add("kill", "SIGKILL (or --signal) one process", _kill, True)
    k.add_argument("--signal", default="KILL", help="signal name (KILL, TERM, STOP, CONT)")
    add("restart", "start one process again", _restart, True)
    lg = add("logs", "print the tail of one process's log", _logs, True)
    lg.add_argument("-n", "--lines", type=int, default=50)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


_guard = guarded("cluster")


@_guard
def _up(args):
    c = LocalCluster(args.run_dir, zk_servers=args.zk_servers, session_timeout_ms=args.session_timeout_ms,
                     observers=args.observers, secure=args.secure)
    c.up(fresh=args.fresh)
    print(c.format_status())
    print(f"\nclients: qjournal --conf {c.conf_dir} dfs ...   stop: qjournal cluster down --run-dir {args.run_dir}")


@_guard
def _down(args):
    LocalCluster.open(args.run_dir).down()


@_guard
def _status(args):
    print(LocalCluster.open(args.run_dir).format_status())


@_guard
def _kill(args):
    sig = getattr(signal, "SIG" + args.signal.upper().removeprefix("SIG"), None)
    if sig is None:
        print(f"cluster: unknown signal {args.signal!r}", file=sys.stderr)
        return 2
    pid = LocalCluster.open(args.run_dir).kill(args.name, sig)
    print(f"sent {sig.name} to {args.name} (pid {pid})")


@_guard
def _restart(args):
    rec = LocalCluster.open(args.run_dir).restart(args.name)
    print(f"restarted {rec.name} (pid {rec.pid}) {rec.address}")


@_guard
def _logs(args):
    print(LocalCluster.open(args.run_dir).logs(args.name, args.lines))

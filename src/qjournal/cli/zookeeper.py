"""``qjournal zookeeper start|stop|status``: a real ZooKeeper for local clusters, tests and demos.

Why a subcommand: operators and scripts (the cluster launcher, CI) need a
ZooKeeper on free loopback ports without writing ``zoo.cfg`` by hand; ``stop``
must leave nothing running. The work is done by :mod:`qjournal.ha.zookeeper`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from qjournal.ha.zookeeper import ZooKeeperEnsemble, ZooKeeperError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("zookeeper")
    sub = p.add_subparsers(dest="zk_command", metavar="ACTION")
    s = sub.add_parser("start", help="start and wait until serving; prints READY {json}")
    s.add_argument("--run-dir", default="run/zookeeper", help="data, configs, logs (default run/zookeeper)")
    s.add_argument("--servers", type=int, default=1, choices=[1, 3, 5], help="ensemble size")
    s.add_argument("--tick-time-ms", type=int, default=500, help="ZooKeeper tickTime")
    s.add_argument("--ready-timeout-s", type=float, default=60.0)
    s.set_defaults(func=_start)
    t = sub.add_parser("stop", help="stop the servers started in --run-dir")
    t.add_argument("--run-dir", default="run/zookeeper")
    t.set_defaults(func=_stop)
    u = sub.add_parser("status", help="mode of each server in --run-dir")
    u.add_argument("--run-dir", default="run/zookeeper")
    u.set_defaults(func=_status)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _start(args: argparse.Namespace) -> int:
    zk = ZooKeeperEnsemble(args.run_dir, size=args.servers, tick_time_ms=args.tick_time_ms)
    try:
        zk.start(ready_timeout_s=args.ready_timeout_s)
    except ZooKeeperError as e:
        print(f"zookeeper: {e}", file=sys.stderr)
        return 1
    info = {"role": "zookeeper", "quorum": zk.connect_string, "run_dir": zk.run_dir,
            "pids": [s.pid for s in zk.servers], "pid": os.getpid()}
    print("READY " + json.dumps(info), flush=True)
    return 0


def _stop(args: argparse.Namespace) -> int:
    try:
        zk = ZooKeeperEnsemble.from_state(args.run_dir)
        zk.stop()
    except ZooKeeperError as e:
        print(f"zookeeper: {e}", file=sys.stderr)
        return 1
    print(f"stopped {len(zk.servers)} ZooKeeper server(s) in {zk.run_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        zk = ZooKeeperEnsemble.from_state(args.run_dir)
    except ZooKeeperError as e:
        print(f"zookeeper: {e}", file=sys.stderr)
        return 1
    print(f"{'id':>3} {'pid':>8} {'alive':>5} {'client':>22} mode")
    for s in zk.servers:
        mode = zk.mode(s) if s.alive() else None
        print(f"{s.server_id:>3} {s.pid or '-':>8} {str(s.alive()):>5} {zk.host + ':' + str(s.client_port):>22} "
              f"{mode or '-'}")
    return 0

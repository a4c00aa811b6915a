"""``qjournal zookeeper start|stop|status|server``: a real ZooKeeper for local clusters, tests, demos
and deployments.

Why a subcommand: operators and scripts (the cluster launcher, CI) need a
ZooKeeper on free loopback ports without writing ``zoo.cfg`` by hand; ``stop``
must leave nothing running. The work is done by :mod:`qjournal.ha.zookeeper`.

``check`` asks every server of ``ha.zookeeper.quorum`` (from the configuration, or ``--quorum``)
for its mode with ``srvr`` and exits 0 only when every one serves and one leads; ``--wait-s``
waits for that (after a first start or a restart).

``server`` is the deployed form (docs/deploy.md, the ``qjournal-zookeeper`` unit): one server of
an ensemble in the foreground, from the ``zoo.cfg`` and ``myid`` that ``qjournal deploy render``
wrote into the configuration directory. It puts ``myid`` into ``dataDir`` (refusing a different
one there: that data belongs to another server) and then *becomes* the Java process
(``exec``), so a service manager watches and signals ZooKeeper itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from qjournal.config.conf import CONF_DIR_ENV, Configuration, split_host_port
from qjournal.errors import QJournalError
from qjournal.ha.zookeeper import ZooKeeperEnsemble, ZooKeeperError, server_argv, server_mode

#: the files ``server`` reads from the configuration directory (written by ``qjournal deploy render``)
ZOO_CFG = "zoo.cfg"
MYID = "zookeeper-myid"


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
    c = sub.add_parser("check", help="the mode of every server of ha.zookeeper.quorum; 0 when all serve")
    c.add_argument("--quorum", help="HOST:PORT,... (default: ha.zookeeper.quorum of --conf)")
    c.add_argument("--wait-s", type=float, default=0.0, help="wait up to this long for all to serve")
    c.set_defaults(func=_check)
    v = sub.add_parser("server", help="run one server in the foreground from <conf dir>/zoo.cfg (deployments)")
    v.add_argument("--config", help=f"the zoo.cfg (default: {ZOO_CFG} in --conf / ${CONF_DIR_ENV})")
    v.add_argument("--heap-mb", type=int, default=256, help="the Java heap (default 256)")
    v.set_defaults(func=_server)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _check(args: argparse.Namespace) -> int:
    try:
        quorum = args.quorum or Configuration.from_args(args).get("ha.zookeeper.quorum")
        if not quorum:
            raise ZooKeeperError("no --quorum and no ha.zookeeper.quorum in the configuration")
        servers = [split_host_port(hp.strip()) for hp in quorum.split(",") if hp.strip()]
    except QJournalError as e:
        print(f"zookeeper check: {e}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + args.wait_s
    while True:
        modes = [server_mode(h, p, timeout_s=1.0) for h, p in servers]
        serving = all(m is not None for m in modes)
        leaders = sum(m in ("leader", "standalone") for m in modes)
        if (serving and leaders == 1) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # poll interval of a readiness probe with a deadline
    for (h, p), m in zip(servers, modes):
        print(f"{h}:{p} {m or 'not serving'}")
    return 0 if serving and leaders == 1 else 1


def read_zoo_cfg(path: str) -> dict[str, str]:
    """The ``key=value`` lines of a ``zoo.cfg`` (comments and blank lines skipped).

    Raises:
        ZooKeeperError: unreadable, or a line that is not ``key=value`` (file and line named).
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ZooKeeperError(f"cannot read {path}: {e}") from e
    out = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ZooKeeperError(f"{path}:{n}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def prepare_data_dir(cfg: dict[str, str], cfg_path: str, myid_path: str) -> str:
    """Make ``dataDir`` and, for an ensemble member, put the configured ``myid`` in it.

    Returns:
        The data directory.

    Raises:
        ZooKeeperError: no ``dataDir``; an ensemble member without ``myid`` file; a ``myid`` in the
            data directory that differs from the configured one.
    """
    data_dir = cfg.get("dataDir")
    if not data_dir:
        raise ZooKeeperError(f"{cfg_path}: no dataDir")
    os.makedirs(data_dir, mode=0o750, exist_ok=True)
    if not any(k.startswith("server.") for k in cfg):
        return data_dir  # standalone: no myid
    try:
        with open(myid_path) as f:
            want = f.read().strip()
    except OSError as e:
        raise ZooKeeperError(f"{cfg_path} names an ensemble but {myid_path} (this server's id) cannot be "
                             f"read: {e}") from e
    if not want.isdigit() or f"server.{want}" not in cfg:
        raise ZooKeeperError(f"{myid_path}: server id {want!r} is not one of the server.N lines of {cfg_path}")
    target = os.path.join(data_dir, "myid")
    try:
        with open(target) as f:
            have = f.read().strip()
    except FileNotFoundError:
        have = None
    if have is not None and have != want:
        raise ZooKeeperError(f"{target} says server {have} but this host is server {want} ({myid_path}): the data "
                             "directory belongs to another server; move it aside")
    if have is None:
        with open(target, "w") as f:
            f.write(want + "\n")
    return data_dir


def _server(args: argparse.Namespace) -> int:
    conf_dir = args.conf or os.environ.get(CONF_DIR_ENV)
    cfg_path = args.config or (os.path.join(conf_dir, ZOO_CFG) if conf_dir else None)
    if cfg_path is None:
        print(f"zookeeper server: no --config and no --conf / ${CONF_DIR_ENV}", file=sys.stderr)
        return 1
    try:
        cfg = read_zoo_cfg(cfg_path)
        data_dir = prepare_data_dir(cfg, cfg_path, os.path.join(os.path.dirname(os.path.abspath(cfg_path)), MYID))
        argv = server_argv(os.path.abspath(cfg_path), args.heap_mb, data_dir)
    except ZooKeeperError as e:
        print(f"zookeeper server: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)  # becomes ZooKeeper: no return
    return 1


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

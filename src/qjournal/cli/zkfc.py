"""``qjournal zkfc``: the ZKFailoverController daemon, and ``qjournal zkfc -formatZK``.

Why a subcommand: one controller process runs beside each NameNode
(seed 004). It prints ``READY {json}`` once it is connected to ZooKeeper and
serving its RPC port, exits 0 on SIGTERM/SIGINT after a clean stop, and exits
non-zero if its health monitor fails. Its HTTP server (``/metrics``, ``/jmx``, a status page:
:mod:`qjournal.ha.http`) listens on ``qjournal.zkfc.http.port``. ``-formatZK`` creates the nameservice's
parent znode (refusing to clobber an existing one unless ``-force``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from qjournal.cli._daemon import (announce_ready, remove_pid_file, run_daemon, setup_daemon_logging, stop_on_signals,
                                  write_pid_file)
from qjournal.config.conf import Configuration
from qjournal.errors import ConfigError, ElectorError, QJournalError
from qjournal.ha.elector import ElectorSettings
from qjournal.ha.http import ZKFCHttpServer, zkfc_http_address_of
from qjournal.ha.zkfc import ZKFCSettings, ZKFailoverController, format_zk, resolve_ha_addresses


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("zkfc")
    p.add_argument("--nn-id", help="NameNode id (default: dfs.ha.namenode.id)")
    p.add_argument("--nameservice", help="nameservice id (default: first of dfs.nameservices)")
    p.add_argument("--pid-file", help="write this process's pid here")
    p.add_argument("-formatZK", "--format-zk", dest="format_zk", action="store_true",
                   help="create the nameservice znode in ZooKeeper and exit")
    p.add_argument("-force", "--force", dest="force", action="store_true",
                   help="with -formatZK: delete an existing znode first")
    p.add_argument("-nonInteractive", "--non-interactive", dest="non_interactive", action="store_true",
                   help="with -formatZK: never prompt (the default here; kept for Hadoop compatibility)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        conf = Configuration.from_args(args)
        setup_daemon_logging("zkfc", conf)
        if args.format_zk:
            return _format_zk(conf, args)
        return run_daemon(conf, _serve(conf, args))
    except QJournalError as e:
        print(f"zkfc: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _format_zk(conf, args: argparse.Namespace) -> int:
    ns = args.nameservice
    if not ns:
        nss = conf.get_list("dfs.nameservices")
        ns = nss[0] if nss else None
    if not ns:
        ns, *_ = resolve_ha_addresses(conf, args.nn_id, None)
    try:
        print(format_zk(ElectorSettings.from_conf(conf, ns), force=args.force))
    except ElectorError as e:
        print(f"zkfc -formatZK: {e}", file=sys.stderr)
        return 2
    return 0


async def _serve(conf, args: argparse.Namespace) -> int:
    settings = ZKFCSettings.from_conf(conf, args.nn_id, args.nameservice)
    http_host, http_port = zkfc_http_address_of(conf, settings.nameservice, settings.nn_id, settings.zkfc_host)
    zkfc = ZKFailoverController(settings)
    http = ZKFCHttpServer(zkfc, conf)
    try:
        await http.start(http_host, http_port)
    except OSError as e:
        raise ConfigError(f"zkfc {settings.nn_id}: cannot serve HTTP on {http_host}:{http_port}: {e}",
                          key="qjournal.zkfc.http.port") from None
    try:
        await zkfc.start(serve_rpc=True)
    except BaseException:
        await http.stop()
        raise
    write_pid_file(args.pid_file)
    stop = stop_on_signals()
    ready = {"role": "zkfc", "nn_id": settings.nn_id, "nameservice": settings.nameservice,
             "rpc": f"{settings.zkfc_host}:{settings.zkfc_port}", "http": http.url.split("://", 1)[1],
             "http_url": http.url,
             "namenode": f"{settings.nn_host}:{settings.nn_port}",
             "zk_session": f"{zkfc.elector.session_id:#x}" if zkfc.elector.session_id else None,
             "pid": os.getpid()}
    announce_ready(ready)
    failed = asyncio.ensure_future(zkfc.failed.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([failed, stopped], return_when=asyncio.FIRST_COMPLETED)
    for t in (failed, stopped):
        t.cancel()
    await zkfc.stop()
    await http.stop()
    remove_pid_file(args.pid_file)
    if zkfc.failure:
        print(f"zkfc {settings.nn_id}: {zkfc.failure}", file=sys.stderr)
        return 3
    return 0

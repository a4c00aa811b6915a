"""``qjournal namenode``: run a NameNode, or format / bootstrap its storage.

Why a separate module: each role owns its CLI (``cli/main.py``). Modes, as
``hdfs namenode``:

* ``-format [-clusterid ID] [-force]``: new namespace, empty image at txid 0;
  formats the local edits dirs and the shared edits dir.
* ``-bootstrapStandby [-force]``: copy the namespace id and newest image from
  the other NameNode of the nameservice (it must be running).
* ``-initializeSharedEdits``: format the shared edits dir and copy the local
  edits after the newest image into it (turning a non-HA NameNode into HA).
* ``-observer``: run the daemon and make it an observer (HDFS-12943) before it announces READY, as
  ``hdfs namenode -observer`` does: an observer's service unit needs no ``haadmin`` after each start.
* no mode: run the daemon in the foreground. It prints ``READY {json}`` once
  serving, writes ``--pid-file``, stops cleanly on SIGTERM/SIGINT (status 0)
  and exits with status 1 when its required journal fails (fenced). It also
  serves HTTP (``namenode/http.py``: ``/jmx``, ``/metrics``, ``/isActive``, ``/``, WebHDFS at ``/webhdfs/v1``;
  HTTPS with mutual TLS under ``dfs.http.policy = HTTPS_ONLY``), announced as
  ``"http"`` (and ``"http_url"``) in the READY line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from qjournal.cli._daemon import (announce_ready, host_port_arg, remove_pid_file, run_daemon, setup_daemon_logging,
                                  stop_on_signals, write_pid_file)
from qjournal.config import Configuration
from qjournal.errors import ConfigError, QJournalError
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.format import bootstrap_standby, format_namenode, initialize_shared_edits
from qjournal.namenode.http import NameNodeHttpServer, http_address_of
from qjournal.util.pause_monitor import PauseMonitor
from qjournal.util.proc import freeze_startup_objects

log = logging.getLogger("qjournal.namenode")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``namenode`` subcommand."""
    p = subparsers.add_parser("namenode", help="run a NameNode, or format / bootstrap its storage",
                              description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("-format", action="store_true", help="format a new namespace")
    mode.add_argument("-bootstrapStandby", action="store_true",
                      help="copy the namespace and newest image from the other NameNode")
    mode.add_argument("-initializeSharedEdits", action="store_true",
                      help="format the shared edits dir and copy the local edits into it")
    mode.add_argument("-observer", action="store_true",
                      help="run as an observer (serves reads, takes no part in the election)")
    p.add_argument("-force", action="store_true", help="re-format even if data exists")
    p.add_argument("-clusterid", help="cluster id for -format")
    p.add_argument("--nn-id", help="this NameNode's id in the nameservice (dfs.ha.namenode.id)")
    p.add_argument("--rpc-address", type=host_port_arg, metavar="HOST:PORT",
                   help="RPC address, port 0 = any (default: dfs.namenode.rpc-address.<ns>.<nn>)")
    p.add_argument("--http-address", type=host_port_arg, metavar="HOST:PORT",
                   help="HTTP(S) address of /jmx, /metrics, /isActive and the status page, port 0 = any "
                        "(default: dfs.namenode.http-address.<ns>.<nn>, else dfs.namenode.http-address; "
                        "when none is set and --rpc-address has port 0, port 0 on the RPC host)")
    p.add_argument("--pid-file", help="write the process id here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Returns the exit status."""
    try:
        conf = Configuration.from_args(args)
        if args.nn_id:
            conf.set("dfs.ha.namenode.id", args.nn_id)
    except QJournalError as e:
        print(f"namenode: {e}", file=sys.stderr)
        return 1
    try:
        setup_daemon_logging("namenode", conf)
    except ConfigError as e:
        print(f"namenode: {e}", file=sys.stderr)
        return 1
    try:
        if args.format:
            return asyncio.run(_format(conf, args))
        if args.bootstrapStandby:
            return asyncio.run(_bootstrap(conf, args))
        if args.initializeSharedEdits:
            return asyncio.run(_init_shared(conf))
        return run_daemon(conf, _serve(conf, args))
    except ConfigError as e:  # qjournal.event-loop
        print(f"namenode: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


async def _format(conf, args) -> int:
    try:
        ns_info = await format_namenode(conf, cluster_id=args.clusterid, force=args.force)
    except (QJournalError, OSError) as e:
        print(f"namenode -format: {e}", file=sys.stderr)
        return 1
    print(f"Formatted namespace {ns_info.namespace_id} of cluster {ns_info.cluster_id}")
    return 0


async def _bootstrap(conf, args) -> int:
    try:
        txid = await bootstrap_standby(conf, args.nn_id, force=args.force)
    except (QJournalError, OSError) as e:
        print(f"namenode -bootstrapStandby: {e}", file=sys.stderr)
        return 1
    print(f"Bootstrapped standby with the image at txid {txid}")
    return 0


async def _init_shared(conf) -> int:
    try:
        n = await initialize_shared_edits(conf)
    except (QJournalError, OSError) as e:
        print(f"namenode -initializeSharedEdits: {e}", file=sys.stderr)
        return 1
    print(f"Initialized the shared edits dir with {n} transactions")
    return 0


async def _serve(conf, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    status = {"code": 0}

    def on_exit(code: int) -> None:
        status["code"] = code
        stop.set()

    nn = NameNode(conf, args.nn_id, exit_hook=on_exit)
    host = port = None
    if args.rpc_address:
        host, port = args.rpc_address
    try:
        addr = await nn.start(host, port)
    except (QJournalError, OSError) as e:
        log.error("NameNode failed to start: %s", e)
        print(f"namenode: failed to start: {e}", file=sys.stderr)
        await nn.stop()
        return 1
    if args.observer:
        try:
            await nn.ha_service.transition_to_observer("user")
        except QJournalError as e:
            log.error("NameNode could not become an observer: %s", e)
            print(f"namenode -observer: {e}", file=sys.stderr)
            await nn.stop()
            return 1
    stop_on_signals(stop)
    write_pid_file(args.pid_file)
    assert addr is not None

    http: NameNodeHttpServer | None = None
    try:
        http = NameNodeHttpServer(nn)  # ConfigError: malformed WebHDFS group overrides
        (hhost, hport), _key, explicit = http_address_of(conf, nn.nn_id)
        if args.http_address:
            hhost, hport = args.http_address
        elif not explicit and args.rpc_address and args.rpc_address[1] == 0:
            hhost, hport = addr[0], 0  # an ephemeral RPC port (tests): never the fixed default 9870
        hbound = await http.start(hhost, hport)
    except (QJournalError, OSError) as e:
        log.error("NameNode HTTP server failed to start: %s", e)
        print(f"namenode: HTTP server failed to start: {e}", file=sys.stderr)
        if http is not None:
            await http.stop()
        await nn.stop()
        remove_pid_file(args.pid_file)
        return 1
    ready = {"role": "namenode", "rpc": f"{addr[0]}:{addr[1]}", "http": f"{hbound[0]}:{hbound[1]}",
             "http_url": http.url, "pid": os.getpid(), "nn_id": nn.nn_id, "state": nn.state.value}
    freeze_startup_objects()
    nn.pause_monitor = PauseMonitor(conf.get_duration_ms("jvm.pause.info-threshold.ms") or 0,
                                    conf.get_duration_ms("jvm.pause.warn-threshold.ms") or 0)
    nn.pause_monitor.start()
    announce_ready(ready)
    try:
        await stop.wait()
    finally:
        log.info("NameNode stopping", extra={"exit_status": status["code"]})
        nn.pause_monitor.stop()
        await http.stop()
        try:
            await asyncio.wait_for(nn.stop(), 30)
        except (asyncio.TimeoutError, QJournalError) as e:
            log.error("NameNode stop did not finish cleanly: %s", e)
        remove_pid_file(args.pid_file)
    return status["code"]

"""``qjournal journalnode``: run a JournalNode daemon in the foreground.

Why a separate module: each role owns its CLI (see ``cli/main.py``). The
daemon follows the process conventions of docs/architecture.md: configuration
from ``--conf``/``-D`` (``dfs.journalnode.edits.dir``, ``dfs.journalnode.rpc-address``,
``dfs.journalnode.http-address``), overridable by flags; structured logs on
stderr; one ``READY {json}`` line on stdout once serving; ``--pid-file``;
SIGTERM or SIGINT stop it cleanly (exit status 0). A start-up failure (bad
directory, address in use) exits with status 1 and a message naming the cause.
"""

from __future__ import annotations

import argparse
import logging
import sys

from qjournal.cli._daemon import (announce_ready, host_port_arg, remove_pid_file, run_daemon, setup_daemon_logging,
                                  stop_on_signals, write_pid_file)
from qjournal.config import Configuration
from qjournal.errors import ConfigError, QJournalError
from qjournal.journalnode.node import JournalNode
from qjournal.transport.http import scheme as http_scheme
from qjournal.util.proc import freeze_startup_objects


log = logging.getLogger("qjournal.journalnode")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``journalnode`` subcommand."""
    p = subparsers.add_parser("journalnode", description=__doc__.splitlines()[0])
    p.add_argument("--edits-dir", help="journal directory (dfs.journalnode.edits.dir)")
    p.add_argument("--rpc-address", type=host_port_arg, metavar="HOST:PORT",
                   help="RPC address, port 0 = any (dfs.journalnode.rpc-address, default port 8485)")
    p.add_argument("--http-address", type=host_port_arg, metavar="HOST:PORT",
                   help="HTTP address, port 0 = any (dfs.journalnode.http-address, default port 8480)")
    p.add_argument("--pid-file", help="write the process id here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT. Returns the exit status."""

    try:
        conf = Configuration.from_args(args)
    except QJournalError as e:
        print(f"journalnode: {e}", file=sys.stderr)
        return 1
    try:
        setup_daemon_logging("journalnode", conf)
    except ConfigError as e:
        print(f"journalnode: {e}", file=sys.stderr)
        return 1
    # The journal threads wake from fdatasync while the loop thread decodes and validates the
    # next batch; a short GIL switch interval lets them take the GIL back promptly instead of
    # waiting up to the default 5 ms (a convoy that halves the write throughput).
    sys.setswitchinterval(0.0005)
    try:
        return run_daemon(conf, _serve(conf, args))
    except ConfigError as e:  # qjournal.event-loop
        print(f"journalnode: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


async def _serve(conf, args: argparse.Namespace) -> int:
    node = JournalNode(conf, edits_dir=args.edits_dir, rpc_address=args.rpc_address,
                       http_address=args.http_address)
    try:
        ready = await node.start()
    except (QJournalError, OSError) as e:
        log.error("JournalNode failed to start: %s", e)
        print(f"journalnode: failed to start: {e}", file=sys.stderr)
        return 1
    stop = stop_on_signals()
    write_pid_file(args.pid_file)
    ready = {k: ready[k] for k in ("role", "rpc", "http", "pid")}
    # as the NameNode's and the ZKFC's READY lines: the web server's URL, scheme included
    ready["http_url"] = f"{http_scheme(conf)}://{ready['http']}" if ready["http"] else None
    freeze_startup_objects()
    announce_ready(ready)
    try:
        await stop.wait()
    finally:
        log.info("JournalNode stopping")
        await node.stop()
        remove_pid_file(args.pid_file)
    return 0

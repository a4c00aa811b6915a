"""The ``qjournal`` command: one entry point, one module per subcommand.

Why a table and a lazy import: each role owns its own CLI module
(``cli/<name>.py`` with a ``register(subparsers)`` function that sets ``func``
on its parser, importing its role at the top), and starting one daemon must not
load every other role (Spark, kazoo, the NameNode...). So the table below holds
each subcommand's one-line help, and only the module of the subcommand being run
is imported. ``qjournal --help`` imports none of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> its one-line help, in help order (the module is ``qjournal.cli.<name>``)
SUBCOMMANDS: dict[str, str] = {
    "journalnode": "run a JournalNode (the quorum's storage daemon)",
    "log": "format, write, read or inspect a qjournal:// journal",
    "oev": "offline edits viewer: dump or check a segment file",
    "namenode": "run a NameNode, or format / bootstrap its storage",
    "dfs": "hdfs dfs-style namespace shell",
    "haadmin": "manage the HA state of the NameNodes",
    "dfsadmin": "NameNode administration: -report, -safemode, -saveNamespace, -rollEdits",
    "oiv": "offline image viewer: an fsimage as XML or delimited text",
    "zkfc": "ZooKeeper failover controller for one NameNode",
    "cluster": "local HA cluster: up, down, status, kill, restart, logs",
    "pipeline": "Spark pipeline: ingest, audit, checkpoint, report",
    "spark": "local Spark standalone cluster from the pyspark package: up, down, status",
    "bench": "benchmark helpers (gen-edits)",
    "demo": "end-to-end automatic failover demo on a local HA cluster",
    "zookeeper": "start/stop a local ZooKeeper (standalone or 3 servers); run or check a deployed server",
    "deploy": "render a host's configuration and systemd units from the cluster description",
    "rpc": "call one RPC of a running daemon and print the result as JSON",
    "monitoring": "the Grafana dashboard, Prometheus alert rules and scrape configuration that ship",
}

#: what ``qjournal --help`` says first (the module docstring above is for the code's readers)
DESCRIPTION = ("qjournal: HDFS-grade high availability for metadata services. JournalNodes keep a quorum "
               "journal, NameNodes serve the namespace with automatic failover through ZooKeeper, and a Spark "
               "pipeline reads the edit log. Run 'qjournal COMMAND --help' for one command's options.")


def _global_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conf", metavar="DIR",
                   help="configuration directory (default: $QJOURNAL_CONF_DIR)")
    p.add_argument("-D", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a configuration key (repeatable)")


def command_of(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (after the global options), or None."""
    pre = argparse.ArgumentParser(add_help=False)
    _global_options(pre)
    _, rest = pre.parse_known_args(argv)
    return rest[0] if rest and rest[0] in SUBCOMMANDS else None


#: modules of the ``pipeline`` extra (``pip install 'qjournal[pipeline]'``), which a daemon host lacks
PIPELINE_EXTRA = ("pyspark", "pandas", "numba", "matplotlib")


class MissingExtraError(SystemExit):
    """A subcommand needs an optional extra that is not installed (exit status 2, message on stderr)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported to register its full arguments.

    Raises:
        MissingExtraError: ``command`` needs the ``pipeline`` extra and it is not installed.
    """
    p = argparse.ArgumentParser(prog="qjournal", description=DESCRIPTION)
    _global_options(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_ in SUBCOMMANDS.items():
        if name == command:
            try:
                module = importlib.import_module(f"qjournal.cli.{name}")
            except ModuleNotFoundError as e:
                if (e.name or "").split(".")[0] not in PIPELINE_EXTRA:
                    raise
                print(f"qjournal {name}: needs {e.name}, which is in the pipeline extra: "
                      "pip install 'qjournal[pipeline]'", file=sys.stderr)
                raise MissingExtraError(2) from e
            module.register(sub)
        else:
            sub.add_parser(name, help=help_, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())

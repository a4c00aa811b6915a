"""The ``qjournal`` command: one entry point, one module per subcommand.

Why a static list: each role owns its own CLI module (``cli/<name>.py`` with a
``register(subparsers)`` function that sets ``func`` on its parser), so adding a
subcommand never means editing another role's code. A module that fails to
import is reported, not hidden.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand modules, in help order
SUBCOMMANDS = [
    "journalnode", "log", "oev", "namenode", "dfs", "haadmin", "zkfc",
    "cluster", "pipeline", "bench", "demo", "zookeeper", "rpc",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qjournal", description=__doc__.splitlines()[0])
    p.add_argument("--conf", metavar="DIR",
                   help="configuration directory (default: $QJOURNAL_CONF_DIR)")
    p.add_argument("-D", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a configuration key (repeatable)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(f"qjournal.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"qjournal.cli.{name}":
                continue  # not built yet
            raise
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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

"""``qjournal monitoring``: the Grafana dashboard, alert rules and scrape configuration that ship with qjournal.

Why a subcommand: an operator who installed the wheel has no source checkout; this prints (or writes) the
files of :mod:`qjournal.monitoring` so they can be loaded into Grafana and Prometheus as they are.
"""

from __future__ import annotations

import argparse
import os
import sys

from qjournal.monitoring import ARTIFACTS, read_artifact

HELP = {
    "dashboard": "the Grafana dashboard (JSON; import it in Grafana, choose the Prometheus data source)",
    "alerts": "the Prometheus alerting rules (rule_files)",
    "alerts-test": "the rules' unit tests (promtool test rules, beside alerts.yml)",
    "scrape-config": "an example Prometheus configuration with the job names the rules expect",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("monitoring", help="the dashboard, alert rules and scrape configuration",
                              description="Print one of the monitoring files that ship with qjournal, or write "
                                          "them all into a directory. What each alert means: docs/operations.md.")
    p.add_argument("what", choices=[*ARTIFACTS, "write"],
                   help="; ".join(f"{k}: {v}" for k, v in HELP.items()) + "; write: all of them into --dir")
    p.add_argument("--dir", help="with 'write': the directory to write the files into")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.what != "write":
        sys.stdout.write(read_artifact(args.what))
        return 0
    if not args.dir:
        print("monitoring write: --dir DIR is required", file=sys.stderr)
        return 2
    os.makedirs(args.dir, exist_ok=True)
    for name, file_name in ARTIFACTS.items():
        path = os.path.join(args.dir, file_name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(read_artifact(name))
        print(path)
    return 0

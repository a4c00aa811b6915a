"""``qjournal deploy render|units|check``: a host's configuration and units from the cluster description.

Why a subcommand: on each host the operator runs the same two commands with the same description
(docs/deploy.md); the host name decides what that host gets. ``--host`` defaults to this machine's
host name, so the commands are the same on every host.

* ``render DESCRIPTION [--host NAME] [--out DIR]``: the host's ``core-site.xml``, ``hdfs-site.xml``
  (and ``zoo.cfg``, ``zookeeper-myid``) into ``DIR`` (default ``/etc/qjournal``).
* ``units DESCRIPTION [--host NAME] [--out DIR]``: the shipped systemd units of the host's roles
  into ``DIR`` (default ``/etc/systemd/system``); prints their names in the order of a first start.
* ``check DESCRIPTION``: check the description and render every host (nothing written); prints
  each host's roles.
"""

from __future__ import annotations

import argparse
import socket

from qjournal.cli._daemon import guarded
from qjournal.deploy import layout
from qjournal.deploy.description import load_description
from qjournal.deploy.render import render_host, write_files
from qjournal.deploy.units import units_for_roles, write_units


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("deploy", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="deploy_command", metavar="ACTION")
    r = sub.add_parser("render", help="write this host's configuration files from the description")
    r.add_argument("description", help="the cluster description (TOML)")
    r.add_argument("--host", help="the host to render (default: this machine's host name)")
    r.add_argument("--out", default=layout.CONF_DIR, help=f"the configuration directory (default {layout.CONF_DIR})")
    r.set_defaults(func=_render)
    u = sub.add_parser("units", help="write the systemd units of this host's roles")
    u.add_argument("description", help="the cluster description (TOML)")
    u.add_argument("--host", help="the host (default: this machine's host name)")
    u.add_argument("--out", default=layout.UNIT_DIR, help=f"where units go (default {layout.UNIT_DIR})")
    u.set_defaults(func=_units)
    c = sub.add_parser("check", help="check the description and render every host (writes nothing)")
    c.add_argument("description", help="the cluster description (TOML)")
    c.set_defaults(func=_check)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


@guarded("deploy render")
def _render(args: argparse.Namespace) -> int:
    desc = load_description(args.description)
    host = args.host or socket.gethostname()
    for path in write_files(render_host(desc, host), args.out):
        print(path)
    return 0


@guarded("deploy units")
def _units(args: argparse.Namespace) -> int:
    desc = load_description(args.description)
    host = desc.host(args.host or socket.gethostname())
    for path in write_units(units_for_roles(host.roles), args.out):
        print(path)
    return 0


@guarded("deploy check")
def _check(args: argparse.Namespace) -> int:
    desc = load_description(args.description)
    for h in desc.hosts.values():
        render_host(desc, h.name)
        units = " ".join(units_for_roles(h.roles)) or "-"
        print(f"{h.name:<24} {','.join(h.roles):<32} {units}")
    return 0

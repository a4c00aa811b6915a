"""``qjournal dfsadmin``: the operator's NameNode commands of ``hdfs dfsadmin`` that apply to a metadata-only namespace.

Why: safe mode, a forced image and a forced log roll are how operators prepare
a NameNode for maintenance (``-safemode enter``, ``-saveNamespace``, then stop
it) and inspect one (``-report``); they expect Hadoop's commands and output.
The NameNode side is ``namenode/admin_protocol.py``; every command but
``-safemode get`` needs the superuser (``++user``/``++groups`` name the caller,
as for ``qjournal dfs``).

Where each command goes (as Hadoop's ``DFSAdmin`` with an HA nameservice):

* to every NameNode of the nameservice, one line each: ``-safemode``
  (``Safe mode is ON in host:port``) and ``-saveNamespace`` (``Save namespace
  successful for host:port``); safe mode belongs to each NameNode. Without a
  nameservice (one NameNode at ``dfs.namenode.rpc-address``) the lines carry no
  address, as Hadoop's. A NameNode that fails does not stop the others (HDFS-16505).
* to the active through the failover client: ``-rollEdits``.
* ``-report``: Hadoop sends it to the active; its DataNode sections have no
  meaning here, so qjournal asks every NameNode for its part
  (``get_report``), prints the active's namespace summary (files and
  directories, last txid, last checkpoint, journals and their health) and then
  one section per NameNode (HA state, safe mode, txids).

* to every NameNode: ``-refreshServiceAcl`` (read the service-level
  authorization policy again from each NameNode's configuration directory:
  ``hadoop-policy.xml`` and the site files) and ``-refreshUserToGroupsMappings``
  (the group overrides and mapping file), one line each as Hadoop's. Both need
  ``hadoop.security.authorization`` and the caller's certificate in
  ``security.refresh.policy.protocol.acl`` / ``security.refresh.user.mappings.protocol.acl``.
  A JournalNode or ZKFC is refreshed with ``qjournal rpc HOST:PORT refresh_service_acl``.

Commands: ``-report``, ``-safemode get|enter|leave|wait|forceExit`` (``forceExit``
is ``leave``: no blocks to force past; ``wait`` polls until safe mode is off),
``-saveNamespace [-beforeShutdown]`` (safe mode first; ``-beforeShutdown`` saves
only when the newest image is older than ``dfs.namenode.checkpoint.period`` or
further behind than ``dfs.namenode.checkpoint.txns``, each times
``dfs.namenode.missing.checkpoint.periods.before.shutdown``), ``-rollEdits``.

Exit status: 0; 1 when the command failed on any NameNode (the reason on
stderr); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from qjournal.config import Configuration
from qjournal.errors import QJournalError
from qjournal.namenode.addresses import namenode_ids
from qjournal.namenode.dfs_client import DFSClient
from qjournal.protocol.protocols import DFSADMIN, REFRESH_POLICY, REFRESH_USER_MAPPINGS

#: how often ``-safemode wait`` asks again (Hadoop: 5 s)
WAIT_POLL_S = 1.0

#: ``-safemode`` words -> the NameNode's actions (``admin_protocol.SAFE_MODE_ACTIONS``)
SAFE_MODE_WORDS = {"get": "get", "enter": "enter", "leave": "leave", "forceExit": "force_exit", "wait": "get"}

RULE = "-------------------------------------------------"


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e.message if isinstance(e, QJournalError) else e}"


class DFSAdmin:
    """What a command needs: the client (identity, NameNode addresses, failover) and whether the
    nameservice is HA (every NameNode is then addressed by name)."""

    def __init__(self, client: DFSClient, conf: Any, ha: bool) -> None:
        self.client = client
        self.conf = conf
        self.ha = ha

    def namenodes(self) -> list[tuple[str, str]]:
        """``(name, "host:port")`` of every NameNode, in configured order."""
        return [(name, f"{host}:{port}") for name, host, port in self.client.addresses]

    def where(self, addr: str) -> str:
        """`` in host:port`` in an HA nameservice (Hadoop's per-NameNode lines), else nothing."""
        return f" in {addr}" if self.ha else ""

    async def call(self, name: str, method: str, **kwargs: Any) -> Any:
        return await self.client.call_on(name, method, **kwargs)


async def _refresh(a: DFSAdmin, method: str, what: str, command: str) -> int:
    """A refresh call on every NameNode (Hadoop's ``Refresh <what> successful for host:port`` lines)."""
    rc = 0
    for name, addr in a.namenodes():
        where = f" for {addr}" if a.ha else ""
        try:
            await a.client.call_on(name, method, client_protocol=False)
        except QJournalError as e:
            print(f"Refresh {what} failed{where}", file=sys.stderr)
            print(f"{command}: {_why(e)}", file=sys.stderr)
            rc = 1
            continue
        print(f"Refresh {what} successful{where}")
    return rc


async def refresh_service_acl(a: DFSAdmin, args: list[str]) -> int:
    """``-refreshServiceAcl`` on every NameNode."""
    return await _refresh(a, REFRESH_POLICY.refresh_service_acl, "service acl", "refreshServiceAcl")


async def refresh_user_mappings(a: DFSAdmin, args: list[str]) -> int:
    """``-refreshUserToGroupsMappings`` on every NameNode."""
    return await _refresh(a, REFRESH_USER_MAPPINGS.refresh_user_to_groups_mappings, "user to groups mapping",
                          "refreshUserToGroupsMappings")


async def safemode(a: DFSAdmin, args: list[str]) -> int:
    """``-safemode get|enter|leave|wait|forceExit`` on every NameNode."""
    word = args[0]
    rc = 0
    for name, addr in a.namenodes():
        try:
            on = await a.call(name, DFSADMIN.set_safe_mode, action=SAFE_MODE_WORDS[word])
            while word == "wait" and on:
                await asyncio.sleep(WAIT_POLL_S)
                on = await a.call(name, DFSADMIN.set_safe_mode, action="get")
        except QJournalError as e:
            print(f"Set safe mode failed{a.where(addr)}, error message: {_why(e)}" if a.ha
                  else f"safemode: {_why(e)}", file=sys.stderr)
            rc = 1
            continue
        print(f"Safe mode is {'ON' if on else 'OFF'}{a.where(addr)}")
    return rc


def _before_shutdown_window(conf: Any) -> tuple[int, int]:
    """``(time window in s, txn gap)`` of ``-saveNamespace -beforeShutdown``."""
    periods = int(conf.get_int("dfs.namenode.missing.checkpoint.periods.before.shutdown") or 0)
    period_s = int(conf.get_duration_ms("dfs.namenode.checkpoint.period") or 0) // 1000
    txns = int(conf.get_int("dfs.namenode.checkpoint.txns") or 0)
    return period_s * periods, txns * periods


async def save_namespace(a: DFSAdmin, args: list[str]) -> int:
    """``-saveNamespace [-beforeShutdown]`` on every NameNode (each must be in safe mode)."""
    window_s = gap = 0
    if args:
        window_s, gap = _before_shutdown_window(a.conf)
        print(f"Do checkpoint if necessary before stopping namenode. The time window is {window_s} seconds, "
              f"and the transaction gap is {gap}")
    rc = 0
    for name, addr in a.namenodes():
        where = f" for {addr}" if a.ha else ""
        try:
            r = await a.call(name, DFSADMIN.save_namespace, time_window_s=window_s, tx_gap=gap)
        except QJournalError as e:
            print(f"Save namespace failed{where}", file=sys.stderr)
            print(f"saveNamespace: {_why(e)}", file=sys.stderr)
            rc = 1
            continue
        print(f"Save namespace successful{where}" if r["saved"] else f"No extra checkpoint has been made{where}")
    return rc


async def roll_edits(a: DFSAdmin, args: list[str]) -> int:
    """``-rollEdits`` on the active (the client fails over to it)."""
    try:
        txid = await a.client.call(DFSADMIN.roll_edits)
    except QJournalError as e:
        print(f"rollEdits: {_why(e)}", file=sys.stderr)
        return 1
    print("Successfully rolled edit logs.")
    print(f"New segment starts at txid {txid}")
    return 0


def _fmt_time(ms: int) -> str:
    """Java's ``Date.toString`` layout, local time (Hadoop's report times)."""
    return time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(ms / 1000.0))


def format_summary(r: dict) -> list[str]:
    """The namespace part of ``-report``, from one NameNode's ``get_report`` answer."""
    out = ["Safe mode is ON"] if r["safe_mode"] else []
    ckpt = (f"txid {r['last_checkpoint_txid']} at {_fmt_time(r['last_checkpoint_time_ms'])}"
            if r["last_checkpoint_time_ms"] else f"txid {r['last_checkpoint_txid']}")
    out += [f"Namespace ID: {r['namespace_id']}",
            f"Cluster ID: {r['cluster_id']}",
            f"Files and directories: {r['files'] + r['directories']} "
            f"({r['files']} files, {r['directories']} directories)",
            f"Last transaction ID: {r['last_txid']}",
            f"Last checkpoint: {ckpt}",
            f"Journals ({len(r['journals'])}):"]
    for j in r["journals"]:
        state = "FAILED" if j["disabled"] == "true" else "OK"
        req = ", required" if j["required"] == "true" else ""
        out.append(f"    {j['manager']} [{state}{req}] {j['stream']}".rstrip())
    return out


def format_namenode(name: str, addr: str, r: dict | BaseException) -> list[str]:
    """One NameNode's section of ``-report`` (Hadoop's ``Name: host:port (hostname)`` blocks)."""
    out = [f"Name: {addr} ({name})"]
    if isinstance(r, BaseException):
        return out + [f"Error: {_why(r)}"]
    return out + [f"HA state: {r['state']}",
                  f"Safe mode: {'ON' if r['safe_mode'] else 'OFF'}",
                  f"Last transaction ID: {r['last_txid']}",
                  f"Last checkpoint txid: {r['last_checkpoint_txid']}"]


async def report(a: DFSAdmin, args: list[str]) -> int:
    """``-report``: the active's namespace summary, then every NameNode's section."""
    parts: list[tuple[str, str, dict | BaseException]] = []
    for name, addr in a.namenodes():
        try:
            parts.append((name, addr, await a.call(name, DFSADMIN.get_report)))
        except QJournalError as e:
            parts.append((name, addr, e))
    answers = [r for _n, _a, r in parts if isinstance(r, dict)]
    if not answers:
        for _n, addr, e in parts:
            print(f"report: {addr}: {_why(e)}", file=sys.stderr)  # type: ignore[arg-type]
        return 1
    active = [r for r in answers if r["state"] == "active"]
    lines = format_summary((active or answers)[0])
    if not active:
        lines.insert(0, "No active NameNode: the summary is from the first NameNode that answered")
    lines += [RULE, f"NameNodes ({len(parts)}):"]
    for name, addr, r in parts:
        lines += [""] + format_namenode(name, addr, r)
    print("\n".join(lines))
    return 0


@dataclass(frozen=True)
class Command:
    """One dfsadmin command: ``async fn(admin, args) -> exit status``, the arguments it accepts (each
    position's allowed words; a trailing ``None`` makes the last one optional) and its usage line."""

    fn: Callable[[DFSAdmin, list[str]], Awaitable[int]]
    usage: str
    args: tuple[tuple[str, ...] | None, ...] = ()


COMMANDS: dict[str, Command] = {
    "-report": Command(report, "-report"),
    "-safemode": Command(safemode, "-safemode <enter | leave | get | wait | forceExit>",
                         (tuple(SAFE_MODE_WORDS),)),
    "-saveNamespace": Command(save_namespace, "-saveNamespace [-beforeShutdown]", (("-beforeShutdown",), None)),
    "-rollEdits": Command(roll_edits, "-rollEdits"),
    "-refreshServiceAcl": Command(refresh_service_acl, "-refreshServiceAcl"),
    "-refreshUserToGroupsMappings": Command(refresh_user_mappings, "-refreshUserToGroupsMappings"),
}


def args_ok(cmd: Command, args: list[str]) -> bool:
    """Do ``args`` fit the command's argument spec?"""
    spec = list(cmd.args)
    optional = bool(spec) and spec[-1] is None
    words = [w for w in spec if w is not None]
    if len(args) > len(words) or len(args) < len(words) - (1 if optional else 0):
        return False
    return all(a in w for a, w in zip(args, words))


def usage() -> str:
    return "Usage: qjournal dfsadmin\n" + "\n".join(f"    [{c.usage}]" for c in COMMANDS.values())


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dfsadmin`` subcommand."""
    p = subparsers.add_parser("dfsadmin", description=__doc__.splitlines()[0], prefix_chars="+",
                              epilog="commands: " + " ".join(COMMANDS))
    p.add_argument("++ns", dest="admin_ns", help="nameservice (default: the first of dfs.nameservices)")
    p.add_argument("++user", dest="admin_user", help="user name sent to the NameNodes (default: $USER)")
    p.add_argument("++groups", dest="admin_groups", help="comma separated groups (default: the user name)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-COMMAND ARGS")
    p.set_defaults(func=run)


async def _run(conf: Configuration, args: argparse.Namespace, cmd: Command, cargs: list[str]) -> int:
    groups = args.admin_groups.split(",") if args.admin_groups else None
    async with DFSClient(conf, nameservice=args.admin_ns, user=args.admin_user, groups=groups) as c:
        return await cmd.fn(DFSAdmin(c, conf, ha=bool(namenode_ids(conf, c.nameservice))), cargs)


def run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if not argv or argv[0] not in COMMANDS:
        print(usage(), file=sys.stderr)
        return 2
    cmd = COMMANDS[argv[0]]
    if not args_ok(cmd, argv[1:]):
        print(f"{argv[0]}: bad arguments {' '.join(argv[1:]) or '(none)'}\nUsage: qjournal dfsadmin [{cmd.usage}]",
              file=sys.stderr)
        return 2
    try:
        conf = Configuration.from_args(args)
        return asyncio.run(_run(conf, args, cmd, argv[1:]))
    except QJournalError as e:
        print(f"{argv[0][1:]}: {_why(e)}", file=sys.stderr)
        return 1


__all__ = ["COMMANDS", "Command", "DFSAdmin", "format_summary", "format_namenode", "args_ok", "run", "register"]

"""``qjournal dfs``: the ``hdfs dfs`` shell for the namespace (metadata commands only).

Why: operators know ``hdfs dfs -ls``; the same commands and output formats
make the NameNode usable and its failover visible from a shell. The client
fails over between the NameNodes of the nameservice (``DFSClient``).

Commands: ``-ls [-d] PATH...``, ``-mkdir [-p] PATH...``, ``-touchz PATH...``,
``-rm [-r|-R] [-f] PATH...``, ``-mv SRC... DST``, ``-chmod [-R] OCTAL PATH...``,
``-chown [-R] OWNER[:GROUP] PATH...``, ``-stat [FORMAT] PATH...``,
``-du [-s] PATH...``, ``-count PATH...``, ``-setrep N PATH...``.
Errors print ``<cmd>: `<path>': <message>`` on stderr; the exit status is 1
when any path failed. Options: ``--user``, ``--groups`` (simple authentication).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

COMMANDS = ("-ls", "-mkdir", "-touchz", "-rm", "-mv", "-chmod", "-chown", "-stat", "-du",
            "-count", "-setrep")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dfs`` subcommand."""
    p = subparsers.add_parser("dfs", help="hdfs dfs-style namespace shell",
                              description=__doc__.splitlines()[0],
                              epilog="commands: " + " ".join(COMMANDS), prefix_chars="+")
    p.add_argument("++user", dest="dfs_user", help="user name sent to the NameNode (default: $USER)")
    p.add_argument("++groups", dest="dfs_groups", help="comma separated groups (default: the user name)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-COMMAND ARGS")
    p.set_defaults(func=run)


def _fmt_time(ms: int, with_seconds: bool = False) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S" if with_seconds else "%Y-%m-%d %H:%M",
                         time.localtime(ms / 1000.0))


def mode_string(st: dict) -> str:
    from qjournal.namenode.namespace import mode_string as ms
    return ms(st["type"] == "d", st["permission"])


def format_ls(statuses: list[dict]) -> list[str]:
    """``hdfs dfs -ls`` lines (columns aligned as Hadoop's Ls command does)."""
    if not statuses:
        return []
    # Hadoop's Ls: replication at least 3 wide, length at least 10 wide, owner/group left-aligned
    rep = [("-" if s["type"] == "d" else str(s["replication"])) for s in statuses]
    wr = max([3] + [len(r) for r in rep])
    wo = max(len(s["owner"]) for s in statuses)
    wg = max(len(s["group"]) for s in statuses)
    wl = max([10] + [len(str(s["length"])) for s in statuses])
    out = []
    for s, r in zip(statuses, rep):
        out.append(f"{mode_string(s)} {r:>{wr}} {s['owner']:<{wo}} {s['group']:<{wg}} "
                   f"{s['length']:>{wl}} {_fmt_time(s['mtime'])} {s['path']}")
    return out


def format_stat(fmt: str, st: dict) -> str:
    """``-stat`` format: %b %F %g %n %o %r %u %y %Y %a %A."""
    out = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "%" and i + 1 < len(fmt):
            c = fmt[i + 1]
            i += 2
            val = {"b": str(st["length"]), "F": "directory" if st["type"] == "d" else
                   ("regular file" if st["length"] else "regular empty file"),
                   "g": st["group"], "n": st["name"] or "/", "o": str(st["block_size"]),
                   "r": str(st["replication"]), "u": st["owner"],
                   "y": _fmt_time(st["mtime"], True), "Y": str(st["mtime"]),
                   "a": f"{st['permission']:o}", "A": mode_string(st)[1:]}.get(c)
            out.append(val if val is not None else "%" + c)
        elif ch == "\\" and fmt[i:i + 2] == "\\n":
            out.append("\n")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _err(cmd: str, path: str, e: BaseException) -> None:
    from qjournal.errors import FileNotFoundError_, QJournalError
    msg = e.message if isinstance(e, QJournalError) else str(e)
    if isinstance(e, FileNotFoundError_):
        msg = "No such file or directory"
    print(f"{cmd[1:]}: `{path}': {msg}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from qjournal.config import Configuration
    from qjournal.errors import QJournalError

    argv = list(args.argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"dfs: expected one of {' '.join(COMMANDS)}, got {argv[:1] or 'nothing'}", file=sys.stderr)
        return 2
    try:
        conf = Configuration.from_args(args)
    except QJournalError as e:
        print(f"dfs: {e}", file=sys.stderr)
        return 1
    groups = args.dfs_groups.split(",") if args.dfs_groups else None
    try:
        return asyncio.run(_run(conf, argv, args.dfs_user, groups))
    except QJournalError as e:
        print(f"dfs: {e}", file=sys.stderr)
        return 1


def _flags(argv: list[str], allowed: str) -> tuple[set[str], list[str]]:
    flags: set[str] = set()
    rest = []
    for i, a in enumerate(argv):
        if a.startswith("-") and len(a) > 1 and not rest and all(c in allowed for c in a[1:]):
            flags.update(a[1:])
        else:
            rest = argv[i:]
            break
    return flags, rest


async def _run(conf: Any, argv: list[str], user: str | None, groups: list[str] | None) -> int:
    from qjournal.errors import FileNotFoundError_, QJournalError
    from qjournal.namenode.dfs_client import DFSClient

    cmd, rest = argv[0], argv[1:]
    rc = 0
    async with DFSClient(conf, user=user, groups=groups) as c:
        if cmd == "-ls":
            flags, paths = _flags(rest, "dR")
            for p in paths or ["/"]:
                try:
                    st = await _stat(c, p)
                    if st["type"] == "d" and "d" not in flags:
                        items = await c.list_status(p)
                        print(f"Found {len(items)} items")
                        for line in format_ls(items):
                            print(line)
                    else:
                        for line in format_ls([st]):
                            print(line)
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-mkdir":
            flags, paths = _flags(rest, "p")
            for p in paths:
                try:
                    await c.mkdirs(p, create_parent="p" in flags)
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-touchz":
            for p in rest:
                try:
                    st = await c.get_file_info(p)
                    if st is not None and st["length"] != 0:
                        raise QJournalError("Not a zero-length file")
                    if st is None:
                        await c.create(p)
                    else:
                        await c.set_times(p, mtime=int(time.time() * 1000))
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-rm":
            flags, paths = _flags(rest, "rRf")
            for p in paths:
                try:
                    await c.delete(p, recursive=bool(flags & {"r", "R"}))
                    print(f"Deleted {p}")
                except FileNotFoundError_ as e:
                    if "f" not in flags:
                        _err(cmd, p, e)
                        rc = 1
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-mv":
            if len(rest) < 2:
                print("mv: needs SRC... DST", file=sys.stderr)
                return 1
            dst = rest[-1]
            for s in rest[:-1]:
                try:
                    await c.rename(s, dst)
                except QJournalError as e:
                    _err(cmd, s, e)
                    rc = 1
        elif cmd in ("-chmod", "-chown", "-setrep"):
            flags, rest2 = _flags(rest, "Rw")
            if len(rest2) < 2:
                print(f"{cmd[1:]}: needs an argument and at least one path", file=sys.stderr)
                return 1
            arg, paths = rest2[0], rest2[1:]
            targets: list[str] = []
            for p in paths:
                targets.append(p)
                if "R" in flags:
                    try:
                        targets.extend(await _walk(c, p))
                    except QJournalError as e:
                        _err(cmd, p, e)
                        rc = 1
            for p in targets:
                try:
                    if cmd == "-chmod":
                        try:
                            perm = int(arg, 8)
                        except ValueError:
                            print(f"chmod: chmod : mode '{arg}' does not match the expected pattern "
                                  f"(octal only)", file=sys.stderr)
                            return 1
                        await c.set_permission(p, perm)
                    elif cmd == "-chown":
                        owner, _, group = arg.partition(":")
                        await c.set_owner(p, owner or None, group or None)
                    else:
                        await c.set_replication(p, int(arg))
                        print(f"Replication {int(arg)} set: {p}")
                except (QJournalError, ValueError) as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-stat":
            fmt = "%y"
            if rest and not rest[0].startswith("/"):
                fmt, rest = rest[0], rest[1:]
            for p in rest:
                try:
                    st = await _stat(c, p)
                    print(format_stat(fmt, st))
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-du":
            flags, paths = _flags(rest, "sh")
            for p in paths or ["/"]:
                try:
                    st = await _stat(c, p)
                    if "s" in flags or st["type"] != "d":
                        cs = await c.get_content_summary(p)
                        print(f"{cs['length']}  {cs['space_consumed']}  {p}")
                    else:
                        for child in await c.list_status(p):
                            cs = await c.get_content_summary(child["path"])
                            print(f"{cs['length']}  {cs['space_consumed']}  {child['path']}")
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
        elif cmd == "-count":
            for p in rest:
                try:
                    cs = await c.get_content_summary(p)
                    print(f"{cs['directory_count']:>12} {cs['file_count']:>12} {cs['length']:>18} {p}")
                except QJournalError as e:
                    _err(cmd, p, e)
                    rc = 1
    return rc


async def _stat(c: Any, path: str) -> dict:
    """The file status of ``path``.

    Raises:
        FileNotFoundError_: ``path`` does not exist.
    """
    from qjournal.errors import FileNotFoundError_

    st = await c.get_file_info(path)
    if st is None:
        raise FileNotFoundError_(f"{path}: No such file or directory", path=path)
    return st


async def _walk(c: Any, path: str) -> list[str]:
    out = []
    st = await c.get_file_info(path)
    if st is None or st["type"] != "d":
        return out
    for child in await c.list_status(path):
        out.append(child["path"])
        if child["type"] == "d":
            out.extend(await _walk(c, child["path"]))
    return out

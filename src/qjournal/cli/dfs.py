"""``qjournal dfs``: the ``hdfs dfs`` shell for the namespace (metadata commands only).

Why: operators know ``hdfs dfs -ls``; the same commands and output formats
make the NameNode usable and its failover visible from a shell. The client
fails over between the NameNodes of the nameservice (``DFSClient``).

Commands: ``-ls [-d] [-R] PATH...``, ``-mkdir [-p] PATH...``, ``-touchz PATH...``,
``-rm [-r|-R] [-f] PATH...``, ``-mv SRC... DST``, ``-chmod [-R] OCTAL PATH...``,
``-chown [-R] OWNER[:GROUP] PATH...``, ``-stat [-R] [FORMAT] PATH...``,
``-du [-s] PATH...``, ``-count PATH...``, ``-setrep N PATH...``,
``-test -e|-d|-f|-s|-z PATH``, ``-find PATH... [-name|-iname PATTERN] [-print|-print0]``, ``-msync``.
Errors print ``<cmd>: `<path>': <message>`` on stderr; the exit status is 1
when any path failed. Options: ``--user``, ``--groups`` (simple authentication).

Commands are a table (:data:`COMMANDS`): each entry names the single-letter
flags it accepts (parsed off the front of its arguments) and a small handler
``async fn(client, flags, args) -> exit status``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from qjournal.config import Configuration
from qjournal.errors import FileNotFoundError_, QJournalError
from qjournal.namenode import namespace
from qjournal.namenode.dfs_client import DFSClient


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dfs`` subcommand."""
    p = subparsers.add_parser("dfs", help="hdfs dfs-style namespace shell",
                              description=__doc__.splitlines()[0],
                              epilog="commands: " + " ".join(COMMANDS), prefix_chars="+")
    p.add_argument("++user", dest="dfs_user", help="user name sent to the NameNode (default: $USER)")
    p.add_argument("++groups", dest="dfs_groups", help="comma separated groups (default: the user name)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-COMMAND ARGS")
    p.set_defaults(func=run)


def _fmt_time(ms: int) -> str:
    """``-ls`` times: local time to the minute (Hadoop's Ls)."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000.0))


def _fmt_utc(ms: int) -> str:
    """``-stat`` %x/%y times: UTC to the second (Hadoop's Stat)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000.0))


def mode_string(st: dict) -> str:
    return namespace.mode_string(st["type"] == "d", st["permission"])


def _rep(st: dict) -> str:
    return "-" if st["type"] == "d" else str(st["replication"])


def ls_widths(statuses: list[dict], widths: tuple[int, int, int, int] = (3, 0, 0, 10)
              ) -> tuple[int, int, int, int]:
    """Column widths (replication, owner, group, length) that fit ``statuses`` and are no narrower than
    ``widths`` (Hadoop's Ls starts at replication 3 wide and length 10 wide, and only widens)."""
    wr, wo, wg, wl = widths
    return (max([wr] + [len(_rep(s)) for s in statuses]),
            max([wo] + [len(s["owner"]) for s in statuses]),
            max([wg] + [len(s["group"]) for s in statuses]),
            max([wl] + [len(str(s["length"])) for s in statuses]))


def ls_line(s: dict, widths: tuple[int, int, int, int]) -> str:
    wr, wo, wg, wl = widths
    return (f"{mode_string(s)} {_rep(s):>{wr}} {s['owner']:<{wo}} {s['group']:<{wg}} "
            f"{s['length']:>{wl}} {_fmt_time(s['mtime'])} {s['path']}")


def format_stat(fmt: str, st: dict) -> str:
    """``-stat`` format, Hadoop's Stat specifiers: %a octal permission, %A symbolic permission,
    %b length in bytes, %F ``directory``/``regular file``, %g group, %n name, %o block size,
    %r replication, %u owner, %x/%y access/modification time (UTC ``yyyy-MM-dd HH:mm:ss``),
    %X/%Y access/modification time in ms since the epoch."""
    out = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "%" and i + 1 < len(fmt):
            c = fmt[i + 1]
            i += 2
            val = {"b": str(st["length"]), "F": "directory" if st["type"] == "d" else "regular file",
                   "g": st["group"], "n": st["name"] or "/", "o": str(st["block_size"]),
                   "r": str(st["replication"]), "u": st["owner"],
                   "x": _fmt_utc(st["atime"]), "X": str(st["atime"]),
                   "y": _fmt_utc(st["mtime"]), "Y": str(st["mtime"]),
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
    msg = e.message if isinstance(e, QJournalError) else str(e)
    if isinstance(e, FileNotFoundError_):
        msg = "No such file or directory"
    print(f"{cmd[1:]}: `{path}': {msg}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
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


async def _run(conf: Configuration, argv: list[str], user: str | None, groups: list[str] | None) -> int:
    command = COMMANDS[argv[0]]
    async with DFSClient(conf, user=user, groups=groups) as c:
        flags, args = _flags(argv[1:], command.flags)
        return await command.fn(c, flags, args)


async def _for_each(cmd: str, paths: list[str], action: Callable[[str], Awaitable[object]],
                    errors: tuple[type[BaseException], ...] = (QJournalError,)) -> int:
    """Run ``action`` on every path; report each failure as ``cmd`` does. Returns the exit status."""
    rc = 0
    for p in paths:
        try:
            await action(p)
        except errors as e:
            _err(cmd, p, e)
            rc = 1
    return rc


async def _stat(c: DFSClient, path: str) -> dict:
    """The file status of ``path``.

    Raises:
        FileNotFoundError_: ``path`` does not exist.
    """
    st = await c.get_file_info(path)
    if st is None:
        raise FileNotFoundError_(f"{path}: No such file or directory", path=path)
    return st


async def _walk(c: DFSClient, path: str) -> list[str]:
    out = []
    st = await c.get_file_info(path)
    if st is None or st["type"] != "d":
        return out
    for child in await c.list_status(path):
        out.append(child["path"])
        if child["type"] == "d":
            out.extend(await _walk(c, child["path"]))
    return out


# ------------------------------------------------------------------ the commands
async def ls(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-ls [-d] [-R] [PATH...]``: a directory's entries; default ``/``.

    Hadoop's Ls: ``-d`` lists the directory itself (and turns ``-R`` off); ``-R`` lists the tree
    depth-first, each directory's entries in name order, without ``Found N items`` lines. The column
    widths only grow during one command, as Hadoop's Ls keeps them: each batch (a directory's entries,
    or a file argument) widens them to fit, and later lines keep the widths of every earlier batch.
    """
    recursive = "R" in flags and "d" not in flags
    rc = 0
    widths = ls_widths([])

    async def batch(items: list[dict]) -> None:
        nonlocal widths, rc
        widths = ls_widths(items, widths)
        for item in items:
            print(ls_line(item, widths))
            if recursive and item["type"] == "d":
                try:
                    await batch(await c.list_status(item["path"]))
                except QJournalError as e:
                    _err("-ls", item["path"], e)
                    rc = 1

    async def show(p: str) -> None:
        st = await _stat(c, p)
        if st["type"] == "d" and "d" not in flags:
            items = await c.list_status(p)
            if items and not recursive:
                print(f"Found {len(items)} items")
            await batch(items)
        else:
            await batch([st])
    failed = await _for_each("-ls", args or ["/"], show)
    return rc or failed


async def mkdir(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-mkdir [-p] PATH...``."""
    return await _for_each("-mkdir", args, lambda p: c.mkdirs(p, create_parent="p" in flags))


async def touchz(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-touchz PATH...``: create empty files; an existing empty file gets a new mtime."""
    async def touch(p: str) -> None:
        st = await c.get_file_info(p)
        if st is not None and st["length"] != 0:
            raise QJournalError("Not a zero-length file")
        if st is None:
            await c.create(p)
        else:
            await c.set_times(p, mtime=int(time.time() * 1000))
    return await _for_each("-touchz", args, touch)


async def rm(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-rm [-r|-R] [-f] PATH...`` (``-f``: a missing path is no error)."""
    async def delete(p: str) -> None:
        try:
            await c.delete(p, recursive=bool(flags & {"r", "R"}))
            print(f"Deleted {p}")
        except FileNotFoundError_:
            if "f" not in flags:
                raise
    return await _for_each("-rm", args, delete)


async def mv(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-mv SRC... DST``."""
    if len(args) < 2:
        print("mv: needs SRC... DST", file=sys.stderr)
        return 1
    dst = args[-1]
    return await _for_each("-mv", args[:-1], lambda s: c.rename(s, dst))


async def _targets(c: DFSClient, cmd: str, flags: set[str], paths: list[str]) -> tuple[list[str], int]:
    """``paths`` and, with ``-R``, everything under them. Returns ``(targets, exit status so far)``."""
    targets: list[str] = []
    rc = 0
    for p in paths:
        targets.append(p)
        if "R" in flags:
            try:
                targets.extend(await _walk(c, p))
            except QJournalError as e:
                _err(cmd, p, e)
                rc = 1
    return targets, rc


def _needs_argument(cmd: str) -> int:
    print(f"{cmd[1:]}: needs an argument and at least one path", file=sys.stderr)
    return 1


async def chmod(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-chmod [-R] OCTAL PATH...``."""
    if len(args) < 2:
        return _needs_argument("-chmod")
    targets, rc = await _targets(c, "-chmod", flags, args[1:])
    try:
        perm = int(args[0], 8)
    except ValueError:
        print(f"chmod: chmod : mode '{args[0]}' does not match the expected pattern "
              f"(octal only)", file=sys.stderr)
        return 1
    failed = await _for_each("-chmod", targets, lambda p: c.set_permission(p, perm),
                             (QJournalError, ValueError))
    return rc or failed


async def chown(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-chown [-R] OWNER[:GROUP] PATH...``."""
    if len(args) < 2:
        return _needs_argument("-chown")
    targets, rc = await _targets(c, "-chown", flags, args[1:])
    owner, _, group = args[0].partition(":")
    failed = await _for_each("-chown", targets, lambda p: c.set_owner(p, owner or None, group or None),
                             (QJournalError, ValueError))
    return rc or failed


async def setrep(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-setrep [-R] N PATH...``."""
    if len(args) < 2:
        return _needs_argument("-setrep")
    targets, rc = await _targets(c, "-setrep", flags, args[1:])

    async def set_replication(p: str) -> None:
        await c.set_replication(p, int(args[0]))
        print(f"Replication {int(args[0])} set: {p}")
    failed = await _for_each("-setrep", targets, set_replication, (QJournalError, ValueError))
    return rc or failed


async def stat(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-stat [-R] [FORMAT] PATH...`` (default format ``%y``; as Hadoop, the first argument is the
    format when it contains ``%``; ``-R``: each path and everything under it)."""
    fmt = "%y"
    if args and "%" in args[0]:
        fmt, args = args[0], args[1:]
    if not args:
        return _needs_argument("-stat")
    targets, rc = await _targets(c, "-stat", flags, args)

    async def show(p: str) -> None:
        print(format_stat(fmt, await _stat(c, p)))
    failed = await _for_each("-stat", targets, show)
    return rc or failed


async def path_test(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-test -e|-d|-f|-s|-z PATH``: exit status 0 when the path exists (``-e``), is a directory
    (``-d``), is a file (``-f``), has a length > 0 (``-s``) or a length of 0 (``-z``); 1 otherwise,
    and when it does not exist. No output (Hadoop's Test)."""
    if not flags:
        print("test: No test flag given", file=sys.stderr)
        return 1
    if len(flags) > 1:
        print("test: Only one test flag is allowed", file=sys.stderr)
        return 1
    if len(args) != 1:
        print(f"test: {'Too many' if args else 'Not enough'} arguments: expected 1 but got {len(args)}",
              file=sys.stderr)
        return 1
    try:
        st = await c.get_file_info(args[0])
    except QJournalError as e:
        _err("-test", args[0], e)
        return 1
    if st is None:
        return 1
    flag = next(iter(flags))
    ok = {"e": True, "d": st["type"] == "d", "f": st["type"] != "d",
          "s": st["length"] > 0, "z": st["length"] == 0}[flag]
    return 0 if ok else 1


def glob_regex(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """A Hadoop ``GlobPattern`` as a regular expression: ``*``, ``?``, ``[...]`` (``!`` or ``^``
    negates), ``{a,b}`` alternatives and ``\\`` escapes; the whole name must match."""
    out = []
    i, curly = 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                raise ValueError(f"Unclosed character class: {pattern}")
            body = pattern[i + 1:end]
            neg = body[:1] in ("!", "^")
            body = body[1:] if neg else body
            out.append("[" + ("^" if neg else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end
        elif ch == "{":
            curly += 1
            out.append("(?:")
        elif ch == "," and curly:
            out.append("|")
        elif ch == "}" and curly:
            curly -= 1
            out.append(")")
        else:
            out.append(re.escape(ch))
        i += 1
    if curly:
        raise ValueError(f"Unclosed group: {pattern}")
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


async def find(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-find PATH... [-name PATTERN | -iname PATTERN]... [-print | -print0]``: every path at or
    under the given ones whose last component matches all the patterns (Hadoop's Find: glob
    patterns, expressions joined by an implicit ``-and``, ``-print`` when no action is given),
    depth-first in name order; default path ``/``."""
    paths = []
    while args and not args[0].startswith("-"):
        paths.append(args.pop(0))
    patterns: list[re.Pattern[str]] = []
    end = "\n"
    while args:
        a = args.pop(0)
        try:
            if a in ("-name", "-iname"):
                if not args:
                    print("find: Not enough arguments: expected 1 but got 0", file=sys.stderr)
                    return 1
                patterns.append(glob_regex(args.pop(0), ignore_case=a == "-iname"))
            elif a == "-print":
                end = "\n"
            elif a == "-print0":
                end = "\0"
            elif a in ("-and", "-a"):
                pass
            else:
                print(f"find: Unexpected argument: {a}", file=sys.stderr)
                return 1
        except ValueError as e:
            print(f"find: {e}", file=sys.stderr)
            return 1
    rc = 0

    def visit(path: str) -> None:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if all(p.fullmatch(name) for p in patterns):
            print(path, end=end)

    async def walk(path: str) -> None:
        nonlocal rc
        try:
            children = await c.list_status(path)
        except QJournalError as e:
            _err("-find", path, e)
            rc = 1
            return
        for child in children:
            visit(child["path"])
            if child["type"] == "d":
                await walk(child["path"])

    async def one(p: str) -> None:
        st = await _stat(c, p)
        visit(p)
        if st["type"] == "d":
            await walk(p)
    failed = await _for_each("-find", paths or ["/"], one)
    return rc or failed


async def du(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-du [-s] [PATH...]``: length and space consumed of each entry (``-s``: of the path); default ``/``."""
    async def show(p: str) -> None:
        st = await _stat(c, p)
        if "s" in flags or st["type"] != "d":
            cs = await c.get_content_summary(p)
            print(f"{cs['length']}  {cs['space_consumed']}  {p}")
        else:
            for child in await c.list_status(p):
                cs = await c.get_content_summary(child["path"])
                print(f"{cs['length']}  {cs['space_consumed']}  {child['path']}")
    return await _for_each("-du", args or ["/"], show)


async def count(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-count PATH...``: directories, files and bytes under each path."""
    async def show(p: str) -> None:
        cs = await c.get_content_summary(p)
        print(f"{cs['directory_count']:>12} {cs['file_count']:>12} {cs['length']:>18} {p}")
    return await _for_each("-count", args, show)


async def msync(c: DFSClient, flags: set[str], args: list[str]) -> int:
    """``-msync``: ask the active NameNode for its latest state id (HDFS-13688's msync) and print it.

    A client reading from observers waits, before its next read, until the observer has applied that state.
    ``qjournal dfs`` already msyncs before the first call of each run (one process, one client), so ``-msync``
    is for scripts that need the point itself, e.g. to wait until an observer's ``/jmx`` shows it."""
    if args:
        print(f"-msync: takes no arguments (got {' '.join(args)})", file=sys.stderr)
        return 1
    try:
        print(await c.msync())
    except QJournalError as e:
        print(f"-msync: {e}", file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True)
class Command:
    """One dfs command.

    Attributes:
        fn: ``async fn(client, flags, args) -> int`` (exit status).
        flags: the single-letter flags it accepts before its arguments.
    """

    fn: Callable[[DFSClient, set[str], list[str]], Awaitable[int]]
    flags: str = ""


#: the commands, in help order
COMMANDS: dict[str, Command] = {
    "-ls": Command(ls, "dR"),
    "-mkdir": Command(mkdir, "p"),
    "-touchz": Command(touchz),
    "-rm": Command(rm, "rRf"),
    "-mv": Command(mv),
    "-chmod": Command(chmod, "Rw"),
    "-chown": Command(chown, "Rw"),
    "-stat": Command(stat, "R"),
    "-du": Command(du, "sh"),
    "-count": Command(count),
    "-setrep": Command(setrep, "Rw"),
    "-test": Command(path_test, "edfsz"),
    "-find": Command(find),
    "-msync": Command(msync),
}

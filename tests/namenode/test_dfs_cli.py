"""``qjournal dfs`` output formats and errors, against a NameNode served from a background thread.

The CLI runs in-process (``cli.main.main``), so no process start-up per command.
"""

from __future__ import annotations

import asyncio
import re
import threading

import pytest

from qjournal.cli import dfs as dfs_cli
from qjournal.cli.main import main as qjournal_main
from qjournal.config import Configuration
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import DFSClient
from qjournal.namenode.format import format_namenode


@pytest.fixture
def namenode(tmp_path):
    conf = Configuration()
    conf.set("dfs.namenode.name.dir", f"file://{tmp_path}/name")
    conf.set("qjournal.namenode.superuser", "hdfs")
    conf.set("dfs.namenode.checkpoint.check.period", "3600s")
    conf.set("dfs.ha.log-roll.period", "0")
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box = {}

    def serve():
        asyncio.set_event_loop(loop)

        async def up():
            await format_namenode(conf, cluster_id="CID-dfs", namespace_id=3)
            nn = NameNode(conf)
            box["addr"] = await nn.start("127.0.0.1", 0)
            box["nn"] = nn
            started.set()

        loop.run_until_complete(up())
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert started.wait(30), "NameNode did not start"
    try:
        yield f"{box['addr'][0]}:{box['addr'][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(box["nn"].stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        t.join(30)


def dfs(addr, capsys, *argv, user="hdfs"):
    rc = qjournal_main(["-D", f"dfs.namenode.rpc-address={addr}", "dfs", "++user", user,
                        "++groups", "supergroup" if user == "hdfs" else user, *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_dfs_commands_and_formats(namenode, capsys):
    a = namenode
    assert dfs(a, capsys, "-mkdir", "-p", "/u/a/b")[0] == 0
    assert dfs(a, capsys, "-touchz", "/u/a/f", "/u/g")[0] == 0
    rc, out, err = dfs(a, capsys, "-mkdir", "/x/y")
    assert rc == 1 and err == "mkdir: `/x/y': No such file or directory\n"  # as hdfs dfs prints it
    rc, out, _ = dfs(a, capsys, "-setrep", "2", "/u/a/f")
    assert rc == 0 and out.strip() == "Replication 2 set: /u/a/f"
    rc, out, _ = dfs(a, capsys, "-ls", "/u/a")
    lines = out.splitlines()
    assert lines[0] == "Found 2 items"
    assert re.fullmatch(r"drwxr-xr-x   - hdfs supergroup          0 \d{4}-\d\d-\d\d \d\d:\d\d /u/a/b", lines[1])
    assert re.fullmatch(r"-rw-r--r--   2 hdfs supergroup          0 \d{4}-\d\d-\d\d \d\d:\d\d /u/a/f", lines[2])
    rc, out, _ = dfs(a, capsys, "-ls", "-d", "/u")
    assert rc == 0 and out.count("\n") == 1 and out.rstrip().endswith(" /u")
    rc, out, _ = dfs(a, capsys, "-du", "-s", "/u")
    assert out.strip() == "0  0  /u"
    rc, out, _ = dfs(a, capsys, "-du", "/u")
    assert out.splitlines() == ["0  0  /u/a", "0  0  /u/g"]
    rc, out, _ = dfs(a, capsys, "-count", "/u")
    assert out == f"{3:>12} {2:>12} {0:>18} /u\n"
    rc, out, _ = dfs(a, capsys, "-stat", "%n %F %a %o", "/u/a/f", "/u/a")
    assert out.splitlines() == ["f regular file 644 134217728", "a directory 755 0"]
    assert dfs(a, capsys, "-chmod", "-R", "700", "/u/a")[0] == 0
    rc, out, _ = dfs(a, capsys, "-stat", "%A", "/u/a/b")
    assert out.strip() == "rwx------"
    rc, _, err = dfs(a, capsys, "-ls", "/u/a", user="bob")
    assert rc == 1 and "Permission denied: user=bob" in err
    rc, _, err = dfs(a, capsys, "-rm", "/u/a")
    assert rc == 1 and "rm: `/u/a': " in err and "Directory is not empty" in err
    rc, _, err = dfs(a, capsys, "-rm", "-f", "/nope")
    assert rc == 0 and err == ""
    rc, out, _ = dfs(a, capsys, "-mv", "/u/g", "/u/a")
    assert rc == 0
    rc, out, _ = dfs(a, capsys, "-rm", "-r", "/u/a")
    assert out.strip() == "Deleted /u/a"
    rc, _, err = dfs(a, capsys, "-chmod", "u+x", "/u")
    assert rc == 1 and "octal only" in err
    rc, _, err = dfs(a, capsys, "-frobnicate", "/u")
    assert rc == 2 and "expected one of" in err


@pytest.fixture
def tree(namenode, capsys):
    """Empty files /t/a/x.txt, /t/a/sub/Y.TXT, /t/b.log, /t/z and the empty directory /t/empty."""
    a = namenode
    assert dfs(a, capsys, "-mkdir", "-p", "/t/a/sub", "/t/empty")[0] == 0
    assert dfs(a, capsys, "-touchz", "/t/a/x.txt", "/t/a/sub/Y.TXT", "/t/b.log", "/t/z")[0] == 0
    return a


LS_LINE = r"[d-][rwx-]{9} +[-\d]+ hdfs supergroup +\d+ \d{4}-\d\d-\d\d \d\d:\d\d "


@pytest.mark.parametrize("argv, paths, found", [
    (["-ls", "-R", "/t"], ["/t/a", "/t/a/sub", "/t/a/sub/Y.TXT", "/t/a/x.txt", "/t/b.log", "/t/empty", "/t/z"],
     None),
    (["-ls", "/t"], ["/t/a", "/t/b.log", "/t/empty", "/t/z"], "Found 4 items"),
    (["-ls", "-R", "-d", "/t"], ["/t"], None),          # -d lists the directory itself, -R ignored
    (["-ls", "-d", "-R", "/t/a"], ["/t/a"], None),
    (["-ls", "-R", "/t/z"], ["/t/z"], None),            # a file lists itself
    (["-ls", "/t/empty"], [], None),                    # no "Found 0 items" (Hadoop prints none)
    (["-ls", "-R", "/t/empty"], [], None),
])
def test_ls_recursive_and_directory(tree, capsys, argv, paths, found):
    rc, out, err = dfs(tree, capsys, *argv)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    if found:
        assert lines.pop(0) == found
    assert [ln.rsplit(" ", 1)[1] for ln in lines] == paths
    assert all(re.match(LS_LINE, ln) for ln in lines), lines


def test_ls_recursive_reports_an_unreadable_subdirectory_and_goes_on(tree, capsys):
    assert dfs(tree, capsys, "-chmod", "700", "/t/a/sub")[0] == 0
    assert dfs(tree, capsys, "-chmod", "777", "/t", "/t/a")[0] == 0
    rc, out, err = dfs(tree, capsys, "-ls", "-R", "/t", user="bob")
    assert rc == 1 and err.startswith("ls: `/t/a/sub': Permission denied: user=bob")
    assert [ln.rsplit(" ", 1)[1] for ln in out.splitlines()] == [
        "/t/a", "/t/a/sub", "/t/a/x.txt", "/t/b.log", "/t/empty", "/t/z"]
    rc, _, err = dfs(tree, capsys, "-ls", "-R", "/nope")
    assert rc == 1 and err == "ls: `/nope': No such file or directory\n"


def test_ls_column_widths_only_grow_during_one_command(tree, capsys):
    """Hadoop's Ls keeps its widths in the command: a wide group in /t/a/sub widens every later line."""
    assert dfs(tree, capsys, "-chown", "hdfs:longergroupname", "/t/a/sub/Y.TXT")[0] == 0
    rc, out, _ = dfs(tree, capsys, "-ls", "-R", "/t")
    # the width of the line up to the path: "supergroup" is 10 wide, "longergroupname" 15
    width = {ln.rsplit(" ", 1)[1]: len(ln.rsplit(" ", 1)[0]) for ln in out.splitlines()}
    narrow = width["/t/a"]
    assert width["/t/a/sub"] == narrow                                    # before the wide batch
    assert width["/t/a/sub/Y.TXT"] == width["/t/a/x.txt"] == width["/t/b.log"] == width["/t/z"] == narrow + 5
    assert " supergroup      " in out.splitlines()[-1]                      # left-aligned, padded
    rc, out, _ = dfs(tree, capsys, "-ls", "/t/a/sub", "/t/z")               # across path arguments too
    assert [len(ln.rsplit(" ", 1)[0]) for ln in out.splitlines() if ln.startswith("-")] == [narrow + 5] * 2


@pytest.mark.parametrize("pattern, name, match", [
    ("*", "", True), ("*", "abc", True), ("a?c", "abc", True), ("a?c", "ac", False),
    ("[a-c]x", "bx", True), ("[!a-c]x", "bx", False), ("[^a-c]x", "dx", True),
    ("{foo,ba{r,z}}", "baz", True), ("{foo,bar}", "foobar", False), ("a,b", "a,b", True),
    ("\\*", "*", True), ("\\*", "x", False), ("x.y", "xzy", False), ("(a)+", "(a)+", True),
])
def test_glob_regex(pattern, name, match):
    assert bool(dfs_cli.glob_regex(pattern).fullmatch(name)) is match


@pytest.mark.parametrize("flag, path, rc", [
    ("-e", "/t", 0), ("-e", "/t/z", 0), ("-e", "/nope", 1),
    ("-d", "/t", 0), ("-d", "/t/z", 1), ("-d", "/nope", 1),
    ("-f", "/t/z", 0), ("-f", "/t", 1), ("-f", "/nope", 1),
    ("-s", "/t/z", 1), ("-s", "/t", 1), ("-s", "/nope", 1),   # every file here is empty
    ("-z", "/t/z", 0), ("-z", "/t/empty", 0), ("-z", "/nope", 1),
])
def test_test(tree, capsys, flag, path, rc):
    assert dfs(tree, capsys, "-test", flag, path) == (rc, "", "")


@pytest.mark.parametrize("argv, err", [
    (["-test", "/t"], "test: No test flag given\n"),
    (["-test", "-e", "-d", "/t"], "test: Only one test flag is allowed\n"),
    (["-test", "-ed", "/t"], "test: Only one test flag is allowed\n"),
    (["-test", "-e", "/t", "/t/z"], "test: Too many arguments: expected 1 but got 2\n"),
    (["-test", "-e"], "test: Not enough arguments: expected 1 but got 0\n"),
])
def test_test_usage_errors(tree, capsys, argv, err):
    assert dfs(tree, capsys, *argv) == (1, "", err)


class _OneFile:
    """A client whose only path is ``/f``, 5 bytes long (the NameNode's RPCs make only empty files)."""

    async def get_file_info(self, path):
        return {"type": "f", "length": 5} if path == "/f" else None


@pytest.mark.parametrize("flag, rc", [("-s", 0), ("-z", 1), ("-f", 0), ("-e", 0), ("-d", 1)])
def test_test_on_a_file_with_data(flag, rc):
    assert asyncio.run(dfs_cli.path_test(_OneFile(), {flag[1]}, ["/f"])) == rc


@pytest.mark.parametrize("argv, printed", [
    (["/t"], ["/t", "/t/a", "/t/a/sub", "/t/a/sub/Y.TXT", "/t/a/x.txt", "/t/b.log", "/t/empty", "/t/z"]),
    (["/t", "-name", "*.txt"], ["/t/a/x.txt"]),
    (["/t", "-iname", "*.txt"], ["/t/a/sub/Y.TXT", "/t/a/x.txt"]),
    (["/t", "-name", "*.txt", "-print"], ["/t/a/x.txt"]),
    (["/t", "-name", "?"], ["/t", "/t/a", "/t/z"]),
    (["/t", "-name", "[ab]*"], ["/t/a", "/t/b.log"]),
    (["/t", "-name", "[!ab]*"], ["/t", "/t/a/sub", "/t/a/sub/Y.TXT", "/t/a/x.txt", "/t/empty", "/t/z"]),
    (["/t", "-name", "[^ab]*.???"], ["/t/a/sub/Y.TXT", "/t/a/x.txt"]),
    (["/t", "-name", "\\*"], []),
    (["/t", "-name", "*.{log,txt}"], ["/t/a/x.txt", "/t/b.log"]),
    (["/t", "-name", "t"], ["/t"]),                    # the argument itself is matched too
    (["/t", "-iname", "*.TXT", "-and", "-name", "x*"], ["/t/a/x.txt"]),
    (["/t/a/sub", "/t/empty"], ["/t/a/sub", "/t/a/sub/Y.TXT", "/t/empty"]),
    (["/t/z", "-name", "z"], ["/t/z"]),
    (["/t", "-name", "nothing"], []),
])
def test_find(tree, capsys, argv, printed):
    rc, out, err = dfs(tree, capsys, "-find", *argv)
    assert (rc, err) == (0, "")
    assert out.splitlines() == printed


def test_find_print0_and_errors(tree, capsys):
    assert dfs(tree, capsys, "-find", "/t/a", "-name", "*.txt", "-print0") == (0, "/t/a/x.txt\0", "")
    rc, out, err = dfs(tree, capsys, "-find", "/nope", "/t/z")
    assert (rc, out, err) == (1, "/t/z\n", "find: `/nope': No such file or directory\n")
    assert dfs(tree, capsys, "-find", "/t", "-size", "0") == (1, "", "find: Unexpected argument: -size\n")
    assert dfs(tree, capsys, "-find", "/t", "-name")[0] == 1


@pytest.mark.parametrize("fmt, want", [
    ("%a", "644"), ("%A", "rw-r--r--"), ("%b", "0"), ("%F", "regular file"), ("%g", "supergroup"),
    ("%n", "z"), ("%o", "134217728"), ("%r", "3"), ("%u", "hdfs"),
    ("%x", "1970-01-02 10:17:36"), ("%X", "123456000"),
    ("%y", "2001-09-09 01:46:40"), ("%Y", "1000000000000"),
    ("%n|%F|%u:%g", "z|regular file|hdfs:supergroup"),
])
def test_stat_specifiers(tree, capsys, fmt, want):
    conf = Configuration()
    conf.set("dfs.namenode.rpc-address", tree)

    async def set_times():
        async with DFSClient(conf, user="hdfs", groups=["supergroup"]) as c:
            await c.set_times("/t/z", mtime=1_000_000_000_000, atime=123_456_000)
    asyncio.run(set_times())
    assert dfs(tree, capsys, "-stat", fmt, "/t/z") == (0, want + "\n", "")


def test_stat_default_format_directory_and_recursion(tree, capsys):
    rc, out, _ = dfs(tree, capsys, "-stat", "/t/z")
    assert rc == 0 and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n", out)
    assert dfs(tree, capsys, "-stat", "%F %a %b", "/t") == (0, "directory 755 0\n", "")
    rc, out, _ = dfs(tree, capsys, "-stat", "-R", "%n", "/t/a")
    assert (rc, out.split()) == (0, ["a", "sub", "Y.TXT", "x.txt"])


def test_msync_prints_the_active_state_id(namenode, capsys):
    """``-msync`` (HDFS-13688 for scripts): the state id after the client's msync, which moves with each write."""
    rc, out, err = dfs(namenode, capsys, "-msync")
    assert rc == 0 and err == "", err
    before = int(out)
    assert dfs(namenode, capsys, "-mkdir", "/after-msync")[0] == 0
    rc, out, _ = dfs(namenode, capsys, "-msync")
    assert rc == 0 and int(out) > before
    rc, out, err = dfs(namenode, capsys, "-msync", "/extra")
    assert rc == 1 and "takes no arguments" in err

"""``qjournal dfs`` output formats and errors, against a NameNode served from a background thread.

The CLI runs in-process (``cli.main.main``), so no process start-up per command.
"""

from __future__ import annotations

import asyncio
import re
import threading

import pytest

from qjournal.cli.main import main as qjournal_main
from qjournal.config import Configuration
from qjournal.namenode.daemon import NameNode
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
    assert out.splitlines() == ["f regular empty file 644 134217728", "a directory 755 0"]
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

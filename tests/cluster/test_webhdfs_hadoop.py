"""Hadoop's own FsShell (the hadoop-client 3.5 jars inside pyspark) against a real local HA cluster over
WebHDFS: the everyday commands give the same namespace and output as ``qjournal dfs``, a non-superuser
is refused by the namespace's permissions, and through the nameservice (``webhdfs://ns1/``, Hadoop's
``ConfiguredFailoverProxyProvider``) FsShell fails over past a standby and past a killed active.

One cluster serves the module; FsShell reads the cluster's own configuration directory (or one that
orders the NameNodes as a test needs). Each FsShell command is one JVM (about 1.5 s), so commands take several
paths where FsShell allows it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pyspark
import pytest

from qjournal.cli.main import main as qjournal_main
from qjournal.config import Configuration
from qjournal.localcluster.launcher import LocalCluster
from qjournal.namenode.dfs_client import CONFIGURED_FAILOVER_PROXY_PROVIDER

JAVA = shutil.which("java")
JARS = os.path.join(os.path.dirname(pyspark.__file__), "jars")
NS = "ns1"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(JAVA is None, reason="java is not installed (scripts/setup.sh installs it)")]


class Hadoop:
    """A running local cluster and the Hadoop client configuration directories that point at it."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.cluster = LocalCluster(os.path.join(root, "cluster"), out=lambda s: None, extra_conf={
            "qjournal.namenode.superuser": "hdfs",
            "hadoop.user.group.static.mapping.overrides": "hdfs=supergroup;alice=staff;"})
        self.cluster.up(fresh=True)
        conf = Configuration.load(self.cluster.conf_dir)
        self.http = {nn: conf.get(f"dfs.namenode.http-address.{NS}.{nn}") for nn in ("nn1", "nn2")}

    def hadoop_conf(self, order: list[str]) -> str:
        """A Hadoop client conf dir naming the nameservice's NameNodes in ``order`` (the client tries them
        in that order), with their HTTP addresses and the failover proxy provider."""
        d = os.path.join(self.root, "hadoop-" + "-".join(order))
        os.makedirs(d, exist_ok=True)
        values = {"dfs.nameservices": NS, f"dfs.ha.namenodes.{NS}": ",".join(order),
                  f"dfs.client.failover.proxy.provider.{NS}": CONFIGURED_FAILOVER_PROXY_PROVIDER}
        values.update({f"dfs.namenode.http-address.{NS}.{nn}": self.http[nn] for nn in order})
        Configuration(values).write_xml(os.path.join(d, "hdfs-site.xml"))
        Configuration().write_xml(os.path.join(d, "core-site.xml"))
        return d

    def fsshell(self, *args: str, user: str = "hdfs", conf_dir: str | None = None) -> subprocess.CompletedProcess:
        """``hdfs dfs ARGS`` as ``user`` (HADOOP_USER_NAME: simple authentication sends it as user.name)."""
        cp = os.pathsep.join([conf_dir or self.cluster.conf_dir, os.path.join(JARS, "*")])
        env = dict(os.environ, HADOOP_USER_NAME=user)
        # C1 only: a short-lived JVM starts in half the time
        return subprocess.run([JAVA, "-XX:TieredStopAtLevel=1", "-cp", cp, "org.apache.hadoop.fs.FsShell", *args],
                              capture_output=True, text=True, timeout=120, env=env)

    def close(self) -> None:
        self.cluster.down()


@pytest.fixture(scope="module")
def hadoop(tmp_path_factory):
    h = Hadoop(str(tmp_path_factory.mktemp("webhdfs-hadoop")))
    try:
        yield h
    finally:
        h.close()


def dfs(hadoop, capsys, *argv, user="hdfs"):
    """``qjournal dfs`` on the same cluster, in process: ``(exit status, stdout, stderr)``."""
    capsys.readouterr()
    groups = "supergroup" if user == "hdfs" else user
    rc = qjournal_main(["--conf", hadoop.cluster.conf_dir, "dfs", "++user", user, "++groups", groups, *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"FsShell exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_fsshell_commands_agree_with_qjournal_dfs(hadoop, capsys):
    active = hadoop.cluster.wait_for_active(60)
    u = f"webhdfs://{hadoop.http[active]}"

    def fs(*args, user="hdfs"):  # with the cluster's own conf dir on the classpath
        return hadoop.fsshell(*args, user=user)

    def strip(text):
        return text.replace(u, "")

    ok(fs("-mkdir", "-p", f"{u}/t/a/b", f"{u}/t/c"))
    ok(fs("-touchz", f"{u}/t/a/f1", f"{u}/t/a/b/f2", f"{u}/t/top"))
    ok(fs("-mv", f"{u}/t/top", f"{u}/t/c/moved"))
    ok(fs("-chmod", "-R", "750", f"{u}/t/a"))
    ok(fs("-chown", "-R", "alice:staff", f"{u}/t/c"))
    assert dfs(hadoop, capsys, "-test", "-e", "/t/top")[0] == 1 and dfs(hadoop, capsys, "-test", "-f", "/t/c/moved")[0] == 0

    listing = ok(fs("-ls", "-R", f"{u}/t"))
    rc, mine, _ = dfs(hadoop, capsys, "-ls", "-R", "/t")
    assert rc == 0 and strip(listing) == mine
    assert re.search(r"^drwxr-x---   - hdfs +supergroup +0 .* /t/a/b$", mine, re.M), mine
    assert re.search(r"^-rw-r--r--   3 alice staff +0 .* /t/c/moved$", mine, re.M), mine

    fmt = "%n %F %u:%g %b %r %o %a %y"
    paths = ["/t/a", "/t/a/f1", "/t/c/moved"]
    assert ok(fs("-stat", fmt, *[u + p for p in paths])) == dfs(hadoop, capsys, "-stat", fmt, *paths)[1]
    assert strip(ok(fs("-count", f"{u}/t", f"{u}/t/a"))) == dfs(hadoop, capsys, "-count", "/t", "/t/a")[1]
    assert strip(ok(fs("-du", f"{u}/t"))) == dfs(hadoop, capsys, "-du", "/t")[1]
    assert fs("-test", "-e", f"{u}/t/nothing").returncode == 1
    assert ok(fs("-cat", f"{u}/t/a/f1")) == ""  # an empty file reads as 0 bytes

    # the namespace's permissions, for a user that is not the superuser
    r = fs("-mkdir", f"{u}/t/a/b/x", user="alice")
    assert r.returncode == 1 and "Permission denied: user=alice" in r.stderr, r.stderr
    ok(fs("-touchz", f"{u}/t/c/hers", user="alice"))  # alice owns /t/c now
    assert dfs(hadoop, capsys, "-stat", "%u:%g", "/t/c/hers")[1] == "alice:staff\n"
    # data cannot be written: a clear refusal, and nothing is left behind
    local = os.path.join(hadoop.root, "data.txt")
    with open(local, "w") as f:
        f.write("bytes")
    r = fs("-put", local, f"{u}/t/data.txt")
    assert r.returncode == 1 and "metadata only" in r.stderr, r.stderr

    ok(fs("-rm", "-r", f"{u}/t/a", f"{u}/t/c/moved"))
    rc, mine, _ = dfs(hadoop, capsys, "-find", "/t")
    assert mine.split() == ["/t", "/t/c", "/t/c/hers"]


def test_fsshell_fails_over_through_the_nameservice(hadoop, capsys):
    c = hadoop.cluster
    active = c.wait_for_active(60)
    standby = "nn2" if active == "nn1" else "nn1"
    # the standby first: its StandbyException sends the client to the active
    ok(hadoop.fsshell("-mkdir", "-p", f"webhdfs://{NS}/ha/one", conf_dir=hadoop.hadoop_conf([standby, active])))
    # kill the active: the standby takes over; the dead NameNode first, so the client must fail over
    c.kill(active)
    assert c.wait_for_active(60, exclude=active) == standby
    dead_first = hadoop.hadoop_conf([active, standby])
    ok(hadoop.fsshell("-touchz", f"webhdfs://{NS}/ha/one/f", f"webhdfs://{NS}/ha/g", conf_dir=dead_first))
    ok(hadoop.fsshell("-mv", f"webhdfs://{NS}/ha/g", f"webhdfs://{NS}/ha/one/g", conf_dir=dead_first))
    listing = ok(hadoop.fsshell("-ls", "-R", f"webhdfs://{NS}/ha", conf_dir=dead_first))
    rc, mine, _ = dfs(hadoop, capsys, "-ls", "-R", "/ha")
    assert rc == 0 and listing.replace(f"webhdfs://{NS}", "") == mine
    assert [ln.rsplit(" ", 1)[1] for ln in mine.splitlines()] == ["/ha/one", "/ha/one/f", "/ha/one/g"]
    # the old active comes back as standby and stays out of the way; the cluster's conf dir works as it is
    c.restart(active)
    ok(hadoop.fsshell("-rm", "-r", f"webhdfs://{NS}/ha"))
    assert dfs(hadoop, capsys, "-test", "-e", "/ha")[0] == 1

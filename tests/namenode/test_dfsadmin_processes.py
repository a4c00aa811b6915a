"""Real processes: ``qjournal dfsadmin`` against an HA pair of NameNodes (file:// shared edits dir).

Shows: -report (the active's summary and one section per NameNode), -safemode enter/get/wait/leave on every
NameNode with a write refused in between and reads served, -saveNamespace (safe mode first; a new image on
each NameNode that loads back), -rollEdits (a new segment at the txid printed), superuser only.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from qjournal.namenode import image as img
from qjournal.protocol.segment import segment_file_name
from qjournal.util.proc import qjournal_argv

from qjournal.util.waiting import wait_until

from .procs import Cluster, file_ha_conf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SU = ("++user", "hdfs", "++groups", "supergroup")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    t = str(tmp_path_factory.mktemp("dfsadmin"))
    c = Cluster(t)
    c.common.update(file_ha_conf(t), **{"dfs.ha.log-roll.period": "0"})   # -rollEdits rolls
    dirs = {nn: f"{t}/{nn}" for nn in ("nn1", "nn2")}
    try:
        c.run("namenode", "-format", "-clusterid", "CID-admin", extra={"dfs.namenode.name.dir": dirs["nn1"]})
        nn1 = c.start("nn1", "namenode", "--nn-id", "nn1", "--rpc-address", "127.0.0.1:0",
                      extra={"dfs.namenode.name.dir": dirs["nn1"]})
        c.common["dfs.namenode.rpc-address.ns1.nn1"] = nn1.ready["rpc"]
        c.run("namenode", "-bootstrapStandby", "--nn-id", "nn2", extra={"dfs.namenode.name.dir": dirs["nn2"]})
        nn2 = c.start("nn2", "namenode", "--nn-id", "nn2", "--rpc-address", "127.0.0.1:0",
                      extra={"dfs.namenode.name.dir": dirs["nn2"]})
        c.common["dfs.namenode.rpc-address.ns1.nn2"] = nn2.ready["rpc"]
        c.run("haadmin", "-transitionToActive", "nn1")
        c.run("dfs", *SU, "-mkdir", "-p", "/user/alice")
        c.run("dfs", *SU, "-touchz", "/user/alice/f")
        c.addrs = [nn1.ready["rpc"], nn2.ready["rpc"]]
        c.dirs = dirs
        c.shared = f"{t}/shared"
        yield c
    finally:
        c.close()


def test_report(pair):
    out = pair.run("dfsadmin", *SU, "-report").stdout
    assert "Cluster ID: CID-admin" in out
    assert "Files and directories: 4 (1 files, 3 directories)" in out
    assert re.search(r"^Journals \(\d+\):$", out, re.M) and "[OK, required]" in out
    sections = out.split("NameNodes (2):")[1]
    assert f"Name: {pair.addrs[0]} (nn1)\nHA state: active\nSafe mode: OFF" in sections
    assert f"Name: {pair.addrs[1]} (nn2)\nHA state: standby\nSafe mode: OFF" in sections
    r = pair.run("dfsadmin", "++user", "bob", "-report", check=False)
    assert r.returncode == 1 and "Superuser privilege is required" in r.stderr


def test_safemode_refuses_writes_until_left(pair):
    on = pair.run("dfsadmin", *SU, "-safemode", "enter").stdout.splitlines()
    assert on == [f"Safe mode is ON in {a}" for a in pair.addrs]
    assert pair.run("dfsadmin", "-safemode", "get").stdout.splitlines() == on   # anyone may ask
    r = pair.run("dfs", *SU, "-mkdir", "/in-safe-mode", check=False)
    assert r.returncode == 1 and "Cannot create directory /in-safe-mode. Name node is in safe mode" in r.stderr
    assert "/user" in pair.run("dfs", *SU, "-ls", "/").stdout   # reads are served
    assert "Safe mode is ON" in pair.run("dfsadmin", *SU, "-report").stdout.splitlines()[0]
    waiter = subprocess.Popen(qjournal_argv(*pair.opts(), "dfsadmin", "-safemode", "wait"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        off = pair.run("dfsadmin", *SU, "-safemode", "leave").stdout.splitlines()
        assert off == [f"Safe mode is OFF in {a}" for a in pair.addrs]
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert out.splitlines() == off
    finally:
        if waiter.poll() is None:
            waiter.kill()
    pair.run("dfs", *SU, "-mkdir", "/after-safe-mode")
    r = pair.run("dfsadmin", "++user", "bob", "-safemode", "enter", check=False)
    assert r.returncode == 1 and r.stderr.count("Set safe mode failed in") == 2


def test_save_namespace_on_every_namenode(pair):
    r = pair.run("dfsadmin", *SU, "-saveNamespace", check=False)
    assert r.returncode == 1 and "Safe mode should be turned ON" in r.stderr
    # the standby tails finalized segments of the file:// shared dir: roll, and let it catch up
    rolled = int(pair.run("dfsadmin", *SU, "-rollEdits").stdout.split()[-1])

    def standby_txid():
        out = pair.run("dfsadmin", *SU, "-report").stdout.split("(nn2)\n")[1]
        return int(re.search(r"Last transaction ID: (\d+)", out).group(1))
    wait_until(lambda: standby_txid() >= rolled - 1, "the standby to apply the rolled segment")
    pair.run("dfsadmin", *SU, "-safemode", "enter")
    try:
        before = {nn: max(t for t, _ in img.list_images(d)) for nn, d in pair.dirs.items()}
        out = pair.run("dfsadmin", *SU, "-saveNamespace").stdout.splitlines()
        assert out == [f"Save namespace successful for {a}" for a in pair.addrs]
        for nn, d in pair.dirs.items():
            txid, path = img.list_images(d)[-1]
            assert txid > before[nn] and txid >= rolled - 1, (nn, before[nn], txid)
            info, table = img.load_image(path)   # loads back, checksum verified
            names = set(table.column("name").to_pylist())
            assert {"user", "alice", "f"} <= names and info.namespace_id > 0
    finally:
        pair.run("dfsadmin", *SU, "-safemode", "leave")


def test_roll_edits(pair):
    out = pair.run("dfsadmin", *SU, "-rollEdits").stdout.splitlines()
    assert out[0] == "Successfully rolled edit logs."
    txid = int(re.fullmatch(r"New segment starts at txid (\d+)", out[1]).group(1))
    name = segment_file_name(txid)
    wait_until(lambda: any(name in files for _d, _s, files in os.walk(pair.shared)), f"{name} in the shared dir")
    r = pair.run("dfsadmin", "++user", "bob", "-rollEdits", check=False)
    assert r.returncode == 1 and "Access denied for user bob" in r.stderr

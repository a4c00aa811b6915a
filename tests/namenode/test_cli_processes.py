"""Real processes: two NameNodes over a file:// shared edits dir, driven by the namenode/haadmin/dfs CLIs.

Shows: -format / -bootstrapStandby, READY lines, haadmin state changes, hdfs-style dfs output,
SIGKILL of the active and a manual failover with no acknowledged op lost.
"""

from __future__ import annotations

import re

import pytest

from .procs import Cluster, file_ha_conf

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def test_file_shared_edits_failover_through_the_clis(cluster, tmp_path):
    t = str(tmp_path)
    cluster.common.update(file_ha_conf(t), **{"dfs.ha.log-roll.period": "200ms"})
    nn1_conf = {"dfs.namenode.name.dir": f"file://{t}/nn1"}
    nn2_conf = {"dfs.namenode.name.dir": f"file://{t}/nn2"}
    out = cluster.run("namenode", "-format", "-clusterid", "CID-cli", extra=nn1_conf)
    assert "Formatted namespace" in out.stdout
    nn1 = cluster.start("nn1", "namenode", "--nn-id", "nn1", "--rpc-address", "127.0.0.1:0",
                        "--pid-file", f"{t}/nn1.pid", extra=nn1_conf)
    assert nn1.ready["role"] == "namenode" and nn1.ready["state"] == "standby"
    assert open(f"{t}/nn1.pid").read().strip() == str(nn1.pid) == str(nn1.ready["pid"])
    cluster.common["dfs.namenode.rpc-address.ns1.nn1"] = nn1.ready["rpc"]
    out = cluster.run("namenode", "-bootstrapStandby", "--nn-id", "nn2", extra=nn2_conf)
    assert "image at txid 0" in out.stdout
    nn2 = cluster.start("nn2", "namenode", "--nn-id", "nn2", "--rpc-address", "127.0.0.1:0", extra=nn2_conf)
    cluster.common["dfs.namenode.rpc-address.ns1.nn2"] = nn2.ready["rpc"]

    assert cluster.run("haadmin", "-getServiceState", "nn1").stdout.strip() == "standby"
    cluster.run("haadmin", "-transitionToActive", "nn1")
    states = cluster.run("haadmin", "-getAllServiceState").stdout
    assert re.search(r"active\s*$", states.splitlines()[0]) and states.splitlines()[1].endswith("standby")
    r = cluster.run("haadmin", "-transitionToActive", "nn2", check=False)
    assert r.returncode == 1 and "Node nn1 is already active" in r.stderr
    cluster.run("haadmin", "-checkHealth", "nn1")

    su = ["dfs", "++user", "hdfs", "++groups", "supergroup"]
    # (the dfs output formats are covered in-process by test_dfs_cli.py; here: through real daemons)
    cluster.run(*su, "-mkdir", "-p", "/user/alice/dir")
    cluster.run(*su, "-touchz", "/acked")
    ls = cluster.run(*su, "-ls", "/user/alice").stdout.splitlines()
    assert ls[0] == "Found 1 items"
    assert re.match(r"^drwxr-xr-x   - hdfs supergroup          0 \d{4}-\d\d-\d\d \d\d:\d\d /user/alice/dir$",
                    ls[1]), ls
    r = cluster.run("dfs", "++user", "bob", "-mkdir", "/user/alice/dir/x", check=False)
    assert r.returncode == 1 and "Permission denied: user=bob" in r.stderr

    nn1.kill()   # SIGKILL the active
    cluster.run("haadmin", "-transitionToActive", "nn2")
    assert cluster.run("haadmin", "-getServiceState", "nn2").stdout.strip() == "active"
    cluster.run(*su, "-mkdir", "/after-failover")   # the client fails over from dead nn1 to nn2
    ls = cluster.run(*su, "-ls", "/").stdout
    assert "/acked" in ls and "/user" in ls and "/after-failover" in ls
    # nn2 stops cleanly on SIGTERM
    assert nn2.stop() == 0

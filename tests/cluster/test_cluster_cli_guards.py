"""Guards of the launcher and the ``qjournal zookeeper`` CLI (fast: nothing but ZooKeeper starts).

Shows: ``cluster up`` refuses a non-empty run directory that is not a cluster's, and a
stopped cluster's directory without ``--fresh``; unknown process names are named in
the error; ``zookeeper start|status|stop`` leaves nothing running.
"""

import json
import subprocess

import pytest

from qjournal.localcluster.launcher import ClusterError, LocalCluster
from qjournal.ha.zookeeper import pid_alive, server_mode
from qjournal.util.proc import qjournal_argv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_up_refuses_foreign_and_stale_run_dirs(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(ClusterError, match="holds no cluster.json"):
        LocalCluster(str(foreign), out=lambda s: None).up(fresh=True)
    assert (foreign / "precious.txt").exists()
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "cluster.json").write_text(json.dumps({"processes": []}))
    with pytest.raises(ClusterError, match="--fresh"):
        LocalCluster(str(stale), out=lambda s: None).up()
    with pytest.raises(ClusterError, match="no process 'nn7'"):
        LocalCluster.open(str(stale), out=lambda s: None).kill("nn7")
    r = subprocess.run(qjournal_argv("cluster", "status", "--run-dir", str(tmp_path / "nothing")),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cluster up" in r.stderr


def test_zookeeper_cli_start_status_stop(tmp_path):
    run_dir = str(tmp_path / "zk")
    r = subprocess.run(qjournal_argv("zookeeper", "start", "--run-dir", run_dir),
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    ready = json.loads(r.stdout.split("READY", 1)[1])
    pids = ready["pids"]
    try:
        host, port = ready["quorum"].split(":")
        assert server_mode(host, int(port)) == "standalone"
        r = subprocess.run(qjournal_argv("zookeeper", "status", "--run-dir", run_dir),
                           capture_output=True, text=True, timeout=60)
        assert "standalone" in r.stdout
    finally:
        r = subprocess.run(qjournal_argv("zookeeper", "stop", "--run-dir", run_dir),
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not [p for p in pids if pid_alive(p)]

"""``qjournal cluster up --observers 1`` on real processes (ZooKeeper, JNs, NNs, ZKFCs, an observer).

Shows: the observer (nn3) comes up in the observer state with no ZKFC; ``cluster status`` lists it with its
state and last applied txid; ``haadmin -transitionToObserver`` is refused for the active; a client of the
cluster's configuration (ObserverReadProxyProvider) reads its own write from the observer; ``cluster down``
leaves nothing running.
"""

import asyncio
import subprocess

import pytest

from qjournal.config import Configuration
from qjournal.localcluster.launcher import LocalCluster
from qjournal.namenode.dfs_client import DFSClient
from qjournal.util.proc import qjournal_argv

from qjournal.util.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def cli(*args, timeout=120):
    return subprocess.run(qjournal_argv(*args), capture_output=True, text=True, timeout=timeout)


def test_cluster_up_with_an_observer(tmp_path):
    run_dir = str(tmp_path / "cluster")
    r = cli("cluster", "up", "--observers", "1", "--run-dir", run_dir)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        c = LocalCluster.open(run_dir, out=lambda s: None)
        assert c.observer_ids == ["nn3"] and "zkfc-nn3" not in c.procs
        assert (c.nn_states()["nn3"] or {}).get("state") == "observer"
        active = c.active_namenode()
        assert active in ("nn1", "nn2")
        # the active cannot become an observer
        r = cli("--conf", c.conf_dir, "haadmin", "-transitionToObserver", active)
        assert r.returncode == 1 and "cannot become an observer" in r.stderr, r.stderr
        conf = Configuration.load(c.conf_dir)

        async def write_then_read():
            async with DFSClient(conf, user="root", groups=["supergroup"]) as client:
                assert client.observer_reads
                await client.mkdirs("/observed")
                st = await client.get_file_info("/observed")
                return st, client.observer_read_count, client.state_id

        st, on_observer, sid = asyncio.run(write_then_read())
        assert st is not None and st["type"] == "d" and on_observer == 1
        wait_until(lambda: ((c.nn_states()["nn3"] or {}).get("last_applied_txid") or 0) >= sid,
                   "the observer applied the write", 30)
        r = cli("cluster", "status", "--run-dir", run_dir)
        assert r.returncode == 0, r.stderr
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("nn3 ")][0]
        assert "observer" in line and "serving reads" in line
        assert int(line.split()[-2]) >= sid         # the TXID column
        assert "TXID" in r.stdout.splitlines()[0]
    finally:
        d = cli("cluster", "down", "--run-dir", run_dir)
        assert d.returncode == 0, d.stdout + d.stderr

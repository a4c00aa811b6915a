"""The local cluster launcher and the demo, on real processes (ZooKeeper, JNs, NNs, ZKFCs).

Shows: ``cluster up`` elects one active; ``cluster kill`` (SIGKILL) of the active
NameNode leads to an automatic takeover by the standby; ``cluster restart``
brings the killed node back as standby; ``cluster status`` reports it;
``haadmin -failover`` hands the active role back through the ZKFCs; a pause (SIGSTOP)
of the active's ZKFC beyond its session timeout makes the other side take over and
fence the old active gracefully;
``cluster down`` leaves no process running. The demo's own oracle (every
acknowledged create present after the failover, nothing invented) passes.
"""

import asyncio
import os
import signal
import subprocess

import pytest

from qjournal.localcluster.demo import run_demo
from qjournal.localcluster.launcher import LocalCluster
from qjournal.ha.zookeeper import pid_alive
from qjournal.util.proc import qjournal_argv

from qjournal.util.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def cli(*args, timeout=120):
    return subprocess.run(qjournal_argv("cluster", *args), capture_output=True, text=True, timeout=timeout)


def all_pids(run_dir):
    c = LocalCluster.open(run_dir, out=lambda s: None)
    return [p.pid for p in c.procs.values() if p.pid]


def test_cluster_cli_kill_active_namenode_and_restart(tmp_path):
    run_dir = str(tmp_path / "cluster")
    r = cli("up", "--run-dir", run_dir)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "is active" in r.stdout
        c = LocalCluster.open(run_dir, out=lambda s: None)
        active = c.active_namenode()
        assert active in ("nn1", "nn2")
        other = "nn2" if active == "nn1" else "nn1"
        r = cli("kill", active, "--run-dir", run_dir)
        assert r.returncode == 0, r.stderr
        assert c.wait_for_active(60, exclude=active) == other
        r = cli("status", "--run-dir", run_dir)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith(other + " ")][0]
        assert "active" in line
        dead = [ln for ln in r.stdout.splitlines() if ln.startswith(active + " ")][0]
        assert " NO " in dead
        r = cli("restart", active, "--run-dir", run_dir)
        assert r.returncode == 0, r.stderr
        c = LocalCluster.open(run_dir, out=lambda s: None)
        wait_until(lambda: (c.nn_states().get(active) or {}).get("state") == "standby", f"{active} back as standby",
                   60)
        assert c.active_namenode() == other
        # its controller must have seen it healthy again before it can take over
        wait_until(lambda: (c.zkfc_states().get(f"zkfc-{active}") or {}).get("health") == "SERVICE_HEALTHY",
                   f"the controller of {active} sees it healthy", 60)
        # graceful manual failover through the ZKFCs: back to the restarted node
        r = subprocess.run(qjournal_argv("--conf", c.conf_dir, "haadmin", "-failover", other, active),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "successful" in r.stdout
        assert c.active_namenode() == active
        assert (c.nn_states()[other] or {}).get("state") == "standby"
        # a "GC pause" of the active's ZKFC longer than its session: the other side takes over
        # and fences the (still running) old active gracefully; once resumed, the paused
        # controller finds its session gone and settles as standby
        c.kill(f"zkfc-{active}", signal.SIGSTOP)
        try:
            assert c.wait_for_active(60, exclude=active) == other
            assert (c.nn_states()[active] or {}).get("state") == "standby"
        finally:
            c.kill(f"zkfc-{active}", signal.SIGCONT)
        wait_until(lambda: (c.zkfc_states().get(f"zkfc-{active}") or {}).get("elector_state") == "STANDBY",
                   f"zkfc-{active} standby after its pause", 60)
        assert c.active_namenode() == other
        r = cli("logs", "zkfc-" + other, "--run-dir", run_dir, "-n", "200")
        assert "fence_old_active_done" in r.stdout or "transition_to_active_done" in r.stdout
    finally:
        pids = all_pids(run_dir) if os.path.exists(os.path.join(run_dir, "cluster.json")) else []
        r = cli("down", "--run-dir", run_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not [p for p in pids if pid_alive(p)]


def test_demo_end_to_end(tmp_path):
    lines = []
    rc = asyncio.run(run_demo(str(tmp_path / "demo"), writers=2, before_s=1.5, after_s=1.5,
                              out=lines.append))
    text = "\n".join(lines)
    assert rc == 0, text
    assert "is ACTIVE" in text and "nothing else was invented" in text and "SUCCESS" in text
    pids = all_pids(str(tmp_path / "demo"))
    assert not [p for p in pids if pid_alive(p)]

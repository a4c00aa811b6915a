"""Fencing methods on real processes, and the HealthMonitor shell against a fake service (no ZooKeeper).

Shows: graceful fencing succeeds without running any method; pidfence kills a
NameNode-looking process and waits for it, treats a dead pid as fenced, refuses
to kill a process that is not a qjournal NameNode and fails without a pid file;
methods run in order and the first success stops the walk; a failing walk
raises FencingError listing every attempt; shell fencing honours its timeout;
sshfence fails cleanly without an ssh client. The HealthMonitor reports every
state change in order and fails terminally on an uninterpretable answer.
"""

import asyncio
import os
import shutil
import subprocess
import sys

import pytest

from qjournal.errors import FencingError
from qjournal.ha.fencing import FencingSettings, HATarget, fence_old_active, parse_fencing_methods
from qjournal.ha.health_monitor import HealthMonitor, HealthMonitorSettings, HealthState
from qjournal.ha.zookeeper import pid_alive

from .fake_ha import FakeHAService, FakeProxy, service_factory
from qjournal.util.waiting import async_wait_until

pytestmark = pytest.mark.slow  # starts real (sleeping) processes for pidfence and shell fencing

TARGET = HATarget("ns1", "nn9", "127.0.0.1", 1, "127.0.0.1", 2)


def settings(text, **kw):
    return FencingSettings(methods=parse_fencing_methods(text), graceful_timeout_ms=500,
                           shell_timeout_ms=kw.get("shell_timeout_ms", 5000), pid_wait_ms=5000,
                           ssh_connect_timeout_ms=1000)


def unreachable():
    async def connect():
        raise ConnectionRefusedError("nn9 is down")
    return connect


def fake_namenode_process():
    # argv contains "qjournal" and "namenode" like a real NameNode's command line
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "qjournal", "namenode"])


def test_graceful_fence_runs_no_method(tmp_path):
    svc = FakeHAService("nn9", state="active")
    marker = tmp_path / "ran"
    how = asyncio.run(fence_old_active(TARGET, settings(f"shell(touch {marker})"),
                                       proxy_factory=service_factory(svc)))
    assert how == "graceful" and svc.state == "standby" and not marker.exists()


def test_pidfence_kills_the_namenode_process(tmp_path):
    p = fake_namenode_process()
    try:
        (tmp_path / "nn9.pid").write_text(f"{p.pid}\n")
        how = asyncio.run(fence_old_active(TARGET, settings(f"pidfence({tmp_path})"),
                                           proxy_factory=unreachable()))
        assert how == f"pidfence({tmp_path})"
        p.wait(timeout=10)
        assert p.returncode == -9
    finally:
        p.kill()
        p.wait()
    # a dead pid is fenced already
    how = asyncio.run(fence_old_active(TARGET, settings(f"pidfence({tmp_path})"), proxy_factory=unreachable()))
    assert how.startswith("pidfence")


def test_pidfence_refuses_other_processes_and_missing_pid_file(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (tmp_path / "nn9.pid").write_text(f"{other.pid}\n")
        with pytest.raises(FencingError) as ei:
            asyncio.run(fence_old_active(TARGET, settings(f"pidfence({tmp_path})"), proxy_factory=unreachable()))
        assert "not a qjournal namenode" in str(ei.value) and pid_alive(other.pid)
        os.unlink(tmp_path / "nn9.pid")
        with pytest.raises(FencingError) as ei:
            asyncio.run(fence_old_active(TARGET, settings(f"pidfence({tmp_path})"), proxy_factory=unreachable()))
        assert "no pid file" in str(ei.value) and "nn9" in str(ei.value)
    finally:
        other.kill()
        other.wait()


def test_methods_in_order_first_success_wins(tmp_path):
    second, third = tmp_path / "second", tmp_path / "third"
    text = f"shell(exit 3)\nshell(touch {second})\nshell(touch {third})"
    how = asyncio.run(fence_old_active(TARGET, settings(text), proxy_factory=unreachable()))
    assert how == f"shell(touch {second})" and second.exists() and not third.exists()


def test_all_methods_fail_lists_every_attempt():
    text = "shell(echo nope; exit 1)\nshell(sleep 30)"
    with pytest.raises(FencingError) as ei:
        asyncio.run(fence_old_active(TARGET, settings(text, shell_timeout_ms=300), proxy_factory=unreachable()))
    msg = str(ei.value)
    assert "graceful transition_to_standby" in msg and "exited with 1: nope" in msg
    assert "timed out after 300 ms" in msg and "ns1/nn9" in msg


def test_sshfence_fails_cleanly_without_ssh_or_sshd():
    # no ssh client: a clear message; with a client: port 1 is closed, so ssh fails and says so
    with pytest.raises(FencingError) as ei:
        asyncio.run(fence_old_active(TARGET, settings("sshfence(:1)"), proxy_factory=unreachable()))
    if shutil.which("ssh") is None:
        assert "no ssh client installed" in str(ei.value)
    else:
        assert "sshfence(:1): ssh exited with" in str(ei.value)


def test_health_monitor_reports_changes_in_order():
    async def main():
        svc = FakeHAService("nn1")
        seen, statuses = [], []
        hm = HealthMonitor(service_factory(svc), HealthMonitorSettings(50, 500, 50),
                           on_health_change=seen.append, on_service_status=statuses.append, name="nn1")
        hm.start()
        try:
            await hm.wait_for_state((HealthState.SERVICE_HEALTHY,), 10)
            svc.healthy = False
            await hm.wait_for_state((HealthState.SERVICE_UNHEALTHY,), 10)
            svc.reachable = False
            await hm.wait_for_state((HealthState.SERVICE_NOT_RESPONDING,), 10)
            svc.reachable, svc.healthy = True, True
            await hm.wait_for_state((HealthState.SERVICE_HEALTHY,), 10)
            svc.state = "active"
            await async_wait_until(lambda: statuses and statuses[-1]["state"] == "active", "status change", 10)
        finally:
            await hm.stop()
        assert seen == [HealthState.SERVICE_HEALTHY, HealthState.SERVICE_UNHEALTHY,
                        HealthState.SERVICE_NOT_RESPONDING, HealthState.SERVICE_HEALTHY]
        assert [s["state"] for s in statuses] == ["standby", "active"]
    asyncio.run(main())


def test_health_monitor_fails_terminally_on_garbage():
    class Garbage(FakeHAService):
        async def rpc_get_service_status(self):
            return {"state": "confused"}

    async def main():
        svc = Garbage("nn1")

        async def connect():
            return FakeProxy(svc)
        hm = HealthMonitor(connect, HealthMonitorSettings(50, 500, 50), name="nn1")
        hm.start()
        try:
            await hm.wait_for_state((HealthState.HEALTH_MONITOR_FAILED,), 10)
            assert "uninterpretable" in hm.last_error and "confused" in hm.last_error
        finally:
            await hm.stop()
    asyncio.run(main())


def test_health_monitor_whose_callback_dies_fails_loudly_instead_of_stalling(caplog):
    """The class of the stuck-controller bug (issue 11): an error escaping a health callback
    used to end the monitor's task silently. Now it is logged as an error, the monitor is
    ``HEALTH_MONITOR_FAILED`` and its owner is told (the ZKFC then exits non-zero)."""
    crashes = []

    def callback(state):
        raise RuntimeError(f"callback broke on {state.value}")

    async def main():
        svc = FakeHAService("nn1")
        hm = HealthMonitor(service_factory(svc), HealthMonitorSettings(50, 500, 50),
                           on_health_change=callback, name="nn1", on_crash=crashes.append)
        hm.start()
        try:
            await async_wait_until(lambda: crashes, "the owner is told of the crash", 10)
        finally:
            await hm.stop()
        assert hm.state is HealthState.HEALTH_MONITOR_FAILED
        assert "callback broke on SERVICE_HEALTHY" in hm.last_error
    asyncio.run(main())
    assert [type(e) for e in crashes] == [RuntimeError]
    assert any(r.levelname == "ERROR" and "health-nn1 died" in r.getMessage() for r in caplog.records)

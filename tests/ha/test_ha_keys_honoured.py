"""HA keys that used to be accepted and ignored, now honoured (issue 15 part 4).

Shows: ``ha.failover-controller.graceful-fence.connection.retries`` retries a
refused connect to the old active (and only that, within one graceful-fence
deadline); ``dfs.ha.fencing.ssh.private-key-files`` becomes ``ssh -i`` options;
``ha.health-monitor.sleep-after-disconnect.ms`` is the pause after a check lost
an open connection, distinct from the connect-retry interval.
"""

import asyncio

from qjournal.config.conf import Configuration
from qjournal.ha import fencing
from qjournal.ha.fencing import FencingSettings, HATarget, graceful_fence, run_fence_method
from qjournal.ha.fencing import parse_fencing_methods
from qjournal.ha.health_monitor import CheckOutcome, HealthMonitorSettings

from .fake_ha import FakeHAService, service_factory

TARGET = HATarget("ns1", "nn9", "127.0.0.1", 8020, "127.0.0.1", 8019)


def flaky(svc, failures):
    """A proxy factory whose first ``failures`` connects are refused."""
    inner = service_factory(svc)
    calls = []

    async def connect():
        calls.append(1)
        if len(calls) <= failures:
            raise ConnectionRefusedError("not yet")
        return await inner()
    return connect, calls


def test_fencing_settings_read_the_keys():
    conf = Configuration()
    conf.set("ha.failover-controller.graceful-fence.connection.retries", "3")
    conf.set("dfs.ha.fencing.ssh.private-key-files", "/k/a, /k/b")
    s = FencingSettings.from_conf(conf)
    assert s.graceful_connection_retries == 3 and s.ssh_private_key_files == ["/k/a", "/k/b"]
    d = FencingSettings.from_conf(Configuration())
    assert d.graceful_connection_retries == 1 and d.ssh_private_key_files == []


def test_graceful_fence_retries_a_refused_connect():
    svc = FakeHAService("nn9", state="active")
    connect, calls = flaky(svc, failures=1)
    assert asyncio.run(graceful_fence(TARGET, connect, 1000, connection_retries=1)) is None
    assert len(calls) == 2 and svc.state == "standby"


def test_graceful_fence_gives_up_after_the_retries():
    svc = FakeHAService("nn9", state="active")
    connect, calls = flaky(svc, failures=3)
    reason = asyncio.run(graceful_fence(TARGET, connect, 1000, connection_retries=2))
    assert reason is not None and "ConnectionRefusedError" in reason
    assert len(calls) == 3 and svc.state == "active"
    connect, calls = flaky(FakeHAService("nn9", state="active"), failures=1)
    assert asyncio.run(graceful_fence(TARGET, connect, 1000, connection_retries=0)) is not None
    assert len(calls) == 1


def test_sshfence_passes_each_private_key_with_dash_i(monkeypatch):
    seen = []

    class Done:
        returncode = 0

        async def communicate(self):
            return b"", b""

    async def fake_exec(*argv, **kw):
        seen.append(list(argv))
        return Done()

    monkeypatch.setattr(fencing.shutil, "which", lambda name: "/usr/bin/ssh")
    monkeypatch.setattr(fencing.asyncio, "create_subprocess_exec", fake_exec)
    s = FencingSettings(methods=parse_fencing_methods("sshfence(hdfs:2222)"),
                        ssh_private_key_files=["/k/id_a", "/k/id_b"])
    assert asyncio.run(run_fence_method(s.methods[0], TARGET, s)) is None
    argv = seen[0]
    assert argv[argv.index("-p") + 1] == "2222"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-i"] == ["/k/id_a", "/k/id_b"]
    assert "hdfs@127.0.0.1" in argv


def test_health_monitor_waits_sleep_after_disconnect_after_losing_a_connection():
    conf = Configuration()
    conf.set("ha.health-monitor.check-interval.ms", "100")
    conf.set("ha.health-monitor.connect-retry-interval.ms", "200")
    conf.set("ha.health-monitor.sleep-after-disconnect.ms", "700")
    s = HealthMonitorSettings.from_conf(conf)
    assert s.sleep_after_disconnect_ms == 700
    nr = CheckOutcome.NOT_RESPONDING
    assert s.wait_after_ms(nr, connected=False, disconnected=True) == 700   # a call lost the connection
    assert s.wait_after_ms(nr, connected=False, disconnected=False) == 200  # a connect failed
    assert s.wait_after_ms(CheckOutcome.HEALTHY, connected=True, disconnected=False) == 100
    assert s.wait_after_ms(CheckOutcome.UNHEALTHY, connected=True, disconnected=False) == 100

"""The hosts harness: namespaces that look like machines, and nothing left behind (issue 27, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from qjournal.hosts import netns
from qjournal.hosts.netns import ETC_NETNS, NETNS_DIR, TAG, HostsError, Network, clean_stale, unavailable_reason
from qjournal.hosts.services import ServiceManager

pytestmark = [pytest.mark.hosts, pytest.mark.xdist_group("hosts")]


@pytest.fixture
def root():
    why = unavailable_reason()
    if why is not None:
        pytest.skip(f"hosts tests skipped: {why}")


def _machine_network() -> str:
    """The machine's own links, addresses and routes (what the harness must never touch)."""
    return "".join(subprocess.run(["ip", "-o", *args], capture_output=True, text=True, check=True).stdout
                   for args in (["link"], ["addr"], ["route"]))


def _ours(prefix: str) -> list[str]:
    return [e for d in (NETNS_DIR, ETC_NETNS, netns.STATE_DIR) for e in netns._listdir(d) if e.startswith(prefix)]


def test_hosts_have_their_own_address_name_and_files_and_reach_each_other(root, tmp_path):
    before = _machine_network()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "f").write_text("shared\n")
    with Network(str(tmp_path / "hosts"), private_dirs=["/etc/qjournal"],
                 shared_mounts={"/opt/qjournal": str(shared)}) as net:
        a, b = net.add_host("alpha"), net.add_host("beta")
        (tmp_path / "hosts" / "alpha" / "etc" / "qjournal" / "who").write_text("alpha\n")
        out = a.run(["sh", "-c", "hostname; cat /etc/qjournal/who; cat /opt/qjournal/f; getent hosts beta"]).stdout
        assert out.split("\n")[:3] == ["alpha", "alpha", "shared"] and b.address in out
        assert b.run(["sh", "-c", "hostname; ls /etc/qjournal"]).stdout == "beta\n"   # beta's own, empty
        srv = b.spawn("srv", [sys.executable, "-c", textwrap.dedent("""
            import socket
            s = socket.create_server(("beta", 7000))
            print("READY {}", flush=True)
            c, peer = s.accept()
            c.sendall(peer[0].encode())
            """)], log_path=str(tmp_path / "srv.log"))
        got = a.run([sys.executable, "-c", "import socket; print(socket.create_connection(('beta', 7000)).recv(64)"
                     ".decode())"]).stdout.strip()
        assert got == a.address                   # the server saw alpha's own address
        srv.proc.wait(10)
        assert a.routes() == [f"{net.subnet} dev eth0 proto kernel scope link src {a.address} "] or \
            a.routes()[0].startswith(str(net.subnet))
        c = net.add_host("gamma")                  # a host that joins later is known to the others at once
        assert c.address in a.run(["getent", "hosts", "gamma"]).stdout
        prefix = net.prefix
    assert _ours(prefix) == []
    assert _machine_network() == before


def test_a_crashed_run_is_cleaned_up_by_the_next(root, tmp_path):
    script = textwrap.dedent(f"""
        import os, sys
        from qjournal.hosts.netns import Network
        net = Network({str(tmp_path / 'crashed')!r})
        net.start()
        h = net.add_host("victim")
        d = h.spawn("sleeper", ["sleep", "600"], log_path={str(tmp_path / 'sleep.log')!r}, ready_timeout_s=None)
        print(net.prefix, d.pid, flush=True)
        os._exit(3)   # a crash: no clean-up
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    prefix, pid = r.stdout.split()
    assert _ours(prefix) and os.path.exists(f"/proc/{pid}")
    clean_stale()                        # (another run starting now may have cleaned it first: fine)
    assert _ours(prefix) == []
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"


def test_a_live_run_is_never_taken_for_a_crashed_one(root, tmp_path):
    with Network(str(tmp_path / "a")) as net:
        net.add_host("one")
        assert net.prefix not in clean_stale()
        assert net.host("one").run(["true"]).returncode == 0


def test_service_manager_waits_for_ready_on_the_notification_socket(root, tmp_path):
    unit = textwrap.dedent(f"""
        [Service]
        Type=notify
        Environment=GREETING=hello
        ExecStart={sys.executable} -c "import os, time; from qjournal.cli._daemon import notify_service_manager; \\
            print(os.environ['GREETING'], flush=True); time.sleep(0.3); notify_service_manager('READY=1'); time.sleep(600)"
        StandardOutput=append:/var/log/qjournal/t.log
        TimeoutStopSec=5s
        """)
    with Network(str(tmp_path / "h"), private_dirs=["/etc/systemd/system", "/var/log/qjournal"]) as net:
        h = net.add_host("svc")
        with open(h.path("/etc/systemd/system/t.service"), "w") as f:
            f.write(unit)
        mgr = ServiceManager(h, net.prefix)
        d = mgr.start("t.service")
        assert mgr.is_active("t.service")
        assert open(h.path("/var/log/qjournal/t.log")).read() == "hello\n"
        with pytest.raises(HostsError, match="running already"):
            mgr.start("t.service")
        assert mgr.stop("t.service") == -15 and not d.alive()
        with pytest.raises(HostsError, match="not installed"):
            mgr.start("u.service")


def test_unprivileged_runs_are_told_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in unavailable_reason()
    with pytest.raises(HostsError, match="root"):
        Network("/nonexistent").start()
    assert TAG == "qjh"

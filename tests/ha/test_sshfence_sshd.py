"""sshfence against a real OpenSSH server on loopback: keys honoured, host keys checked.

Shows: with the server's host key in the configured known_hosts file and the configured private key, sshfence
logs in and ``fuser -k`` kills the process listening on the target port; with an empty known_hosts file, or one
that holds another key for the host (a machine in the middle), the method fails with a message naming the host key
and the key to fix, and the process lives; with a key the server does not accept it fails; with
``strict-host-key-checking`` off (Hadoop's behaviour) the unknown host is accepted.

The server is Debian's ``openssh-server`` (installed, not started, by ``scripts/setup.sh``), run here with its own
configuration, host key and authorized_keys in a temporary directory, on a free port.
"""

import asyncio
import getpass
import os
import shutil
import socket
import subprocess
import sys

import pytest

from qjournal.config import Configuration
from qjournal.ha.fencing import (FencingSettings, HATarget, parse_fencing_methods, run_fence_method,
                                 ssh_fence_argv)
from qjournal.ha.zookeeper import free_ports

from qjournal.util.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SSHD = "/usr/sbin/sshd"


def keygen(path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return (path.parent / (path.name + ".pub")).read_text().strip()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not os.path.exists(SSHD) or shutil.which("ssh") is None or shutil.which("fuser") is None:
        pytest.fail("openssh-server, the ssh client and fuser are installed by scripts/setup.sh: run it")
    d = tmp_path_factory.mktemp("sshd")
    host_pub = keygen(d / "host_key")
    client_pub = keygen(d / "client_key")
    keygen(d / "stranger_key")
    (d / "authorized_keys").write_text(client_pub + "\n")
    port = free_ports(1)[0]
    (d / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host_key'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", f"PidFile {d / 'sshd.pid'}",
        "UsePAM no", "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", "LogLevel ERROR", ""]))
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=open(d / "sshd.log", "wb"))

    def listening():
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}: {(d / 'sshd.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    wait_until(listening, "sshd listening", 20)
    yield {"dir": d, "port": port, "host_pub": host_pub}
    proc.terminate()
    proc.wait(10)


def victim():
    """A process listening on a free port (the "old active"), and that port."""
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-c",
                             "import socket,sys; s=socket.socket(); "
                             "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                             f"s.bind(('127.0.0.1', {port})); s.listen(); print('up', flush=True); s.accept()"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc, port


def fence(sshd, port, known_hosts, key="client_key", strict=True):
    conf = Configuration()
    conf.set("dfs.ha.fencing.methods", f"sshfence({getpass.getuser()}:{sshd['port']})")
    conf.set("dfs.ha.fencing.ssh.private-key-files", str(sshd["dir"] / key))
    conf.set("dfs.ha.fencing.ssh.connect-timeout", "10s")
    conf.set("qjournal.ha.fencing.ssh.known-hosts-files", str(known_hosts))
    conf.set("qjournal.ha.fencing.ssh.strict-host-key-checking", "true" if strict else "false")
    s = FencingSettings.from_conf(conf)
    target = HATarget("ns1", "nn1", "127.0.0.1", port)
    return asyncio.run(run_fence_method(s.methods[0], target, s))


def known_hosts_file(sshd, name, key_line):
    path = sshd["dir"] / name
    path.write_text(f"[127.0.0.1]:{sshd['port']} {key_line}\n" if key_line else "")
    return path


def test_sshfence_kills_the_listener_when_the_host_key_is_known(sshd):
    proc, port = victim()
    try:
        kh = known_hosts_file(sshd, "known_hosts", sshd["host_pub"])
        assert fence(sshd, port, kh) is None
        assert proc.wait(20) != 0  # killed by fuser -k
    finally:
        proc.kill()


def test_sshfence_refuses_an_unknown_or_changed_host_key(sshd):
    proc, port = victim()
    try:
        for name, line in (("empty_known_hosts", ""),
                           ("other_known_hosts",
                            (sshd["dir"] / "stranger_key.pub").read_text().strip())):
            kh = known_hosts_file(sshd, name, line)
            reason = fence(sshd, port, kh)
            assert reason is not None and "refused the host key of 127.0.0.1" in reason, reason
            assert str(kh) in reason and "known-hosts-files" in reason
            assert proc.poll() is None  # not fenced: still listening
    finally:
        proc.kill()
        proc.wait()


def test_sshfence_fails_with_a_key_the_server_does_not_accept(sshd):
    proc, port = victim()
    try:
        kh = known_hosts_file(sshd, "known_hosts", sshd["host_pub"])
        reason = fence(sshd, port, kh, key="stranger_key")
        assert reason is not None and "Permission denied" in reason, reason
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_sshfence_without_host_key_checking_accepts_an_unknown_host(sshd):
    proc, port = victim()
    try:
        kh = known_hosts_file(sshd, "empty_known_hosts2", "")
        assert fence(sshd, port, kh, strict=False) is None
        assert proc.wait(20) != 0
    finally:
        proc.kill()


def test_the_command_line_names_the_known_hosts_files():
    s = FencingSettings(methods=parse_fencing_methods("sshfence"), ssh_known_hosts_files=["/a/kh", "/b/kh"])
    argv = ssh_fence_argv("/usr/bin/ssh", "", HATarget("ns1", "nn1", "h1", 8020), s)
    assert "StrictHostKeyChecking=yes" in argv and "UserKnownHostsFile=/a/kh /b/kh" in argv
    s = FencingSettings(methods=parse_fencing_methods("sshfence"), ssh_strict_host_key_checking=False)
    argv = ssh_fence_argv("/usr/bin/ssh", "", HATarget("ns1", "nn1", "h1", 8020), s)
    assert "StrictHostKeyChecking=no" in argv and "UserKnownHostsFile=/dev/null" in argv

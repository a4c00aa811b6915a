"""A qjournal cluster deployed on test hosts by following ``docs/deploy.md``.

Why: the hosts tests (``tests/hosts``) and the heavier runs share the same set-up: hosts made from the
cluster description, each with the private directories of :mod:`qjournal.deploy.layout`, one
shared ``/opt/qjournal``, a service manager per host, the runbook of ``docs/deploy.md``, the client
loads and the merged history. Everything an operator would do goes through the runbook's blocks or
the installed ``qjournal`` command on a host; this module only adds what an operator does by hand
(copying files to hosts) and what a test needs to observe (the clients' histories).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from qjournal.deploy import layout
from qjournal.deploy.description import ClusterDescription, parse_description
from qjournal.hosts.netns import Host, HostsError, Network
from qjournal.hosts.runbook import Runbook, fenced_block, parse_runbook
from qjournal.hosts.services import ServiceManager
from qjournal.sim.history import Event, History, event_from_jsonable, merge_histories
from qjournal.util.proc import Daemon

__all__ = ["HostCluster", "StepStats", "step_stats", "SOURCE_FILES"]

#: what the build machine's source checkout needs to build the wheel
SOURCE_FILES = ("pyproject.toml", "README.md", "src")
#: the marked toml block of docs/deploy.md that is the cluster's description
DESCRIPTION_BLOCK = "cluster-description"


@dataclass
class StepStats:
    """What clients saw during one step (a time window)."""

    name: str
    start: float
    end: float
    ops: int = 0                 # operations answered (acknowledged or failed) inside the window
    failed: int = 0              # of which failed after the client's retries
    max_latency_s: float = 0.0   # the longest operation that overlapped the window
    slowest: str = ""

    def row(self) -> str:
        return (f"{self.name}: {self.end - self.start:.1f}s, {self.ops} ops answered, {self.failed} failed, "
                f"longest {self.max_latency_s * 1000:.0f} ms ({self.slowest})")


def step_stats(history: History, steps: list[tuple[str, float, float]]) -> list[StepStats]:
    """Per step: operations answered in its window, failures, and the longest operation (call to answer,
    retries included; reads too) that overlapped it. Times are the history's clock."""
    calls: dict[tuple[str, int], Event] = {}
    spans: list[tuple[float, float, bool, str]] = []      # (called, answered, failed, what)
    for e in history:
        kind = type(e).__name__
        if kind == "OpCalled":
            calls[(e.client, e.op_id)] = e
        elif kind in ("OpAcked", "OpFailed"):
            c = calls.pop((e.client, e.op_id), None)
            if c is not None:
                spans.append((c.time, e.time, kind == "OpFailed", f"{c.method} {c.path} by {e.client}"))
        elif kind == "NsRead" and e.call_time >= 0:
            spans.append((e.call_time, e.time, False, f"read {e.path} by {e.client}"))
    out = []
    for name, start, end in steps:
        s = StepStats(name, start, end)
        for called, answered, failed, what in spans:
            if start <= answered <= end:
                s.ops += 1
                s.failed += failed
            if called <= end and answered >= start and answered - called > s.max_latency_s:
                s.max_latency_s, s.slowest = answered - called, what
        out.append(s)
    return out


@dataclass
class _Load:
    host: str
    name: str
    out_inside: str
    daemon: Daemon


@dataclass
class HostCluster:
    """The hosts of a description, deployed and driven through ``docs/deploy.md``.

    Args:
        workdir: the run's directory on the machine (hosts' roots, the shared ``/opt/qjournal``,
            the source copy, the wheelhouse).
        doc_text: the text of ``docs/deploy.md``.
        log: progress lines.
        opt_dir: the machine's directory mounted as every host's ``/opt/qjournal`` (default: one in
            ``workdir``); two clusters given the same one share what ``install`` put there.
    """

    workdir: str
    doc_text: str
    log: Callable[[str], None] = print
    opt_dir: str = ""
    desc: ClusterDescription = field(init=False)
    net: Network = field(init=False)
    services: dict[str, ServiceManager] = field(default_factory=dict)
    runbook: Runbook = field(init=False)
    loads: list[_Load] = field(default_factory=list)
    #: seconds each runbook block took, in the order run
    timings: list[tuple[str, float]] = field(default_factory=list)
    #: loads started so far (their names, hence their clients' directories, are never reused)
    loads_started: int = 0

    def __post_init__(self) -> None:
        self.workdir = os.path.abspath(self.workdir)
        self.description_text = fenced_block(self.doc_text, "toml", DESCRIPTION_BLOCK, "docs/deploy.md")
        self.desc = parse_description(self.description_text, f"docs/deploy.md ({DESCRIPTION_BLOCK})")
        self.opt_dir = os.path.abspath(self.opt_dir or os.path.join(self.workdir, "opt-qjournal"))
        self.net = Network(os.path.join(self.workdir, "hosts"),
                           private_dirs=[layout.CONF_DIR, layout.DATA_DIR, layout.LOG_DIR, layout.UNIT_DIR],
                           shared_mounts={layout.PREFIX: self.opt_dir})
        os.makedirs(self.opt_dir, exist_ok=True)
        self.wheelhouse = os.path.join(self.workdir, "wheelhouse")
        self.source_dir = os.path.join(self.workdir, "source")

    # -- life
    def start(self, extra_hosts: tuple[str, ...] = ()) -> None:
        """Make a host for every host of the description (and ``extra_hosts``), and the runbook."""
        self.net.start()
        for name in [*self.desc.hosts, *extra_hosts]:
            self.add_host(name)
        self.runbook = Runbook(parse_runbook(self.doc_text, "docs/deploy.md"), self.net.hosts, self.services,
                               self.resolve, self.source_dir, env={"WHEELHOUSE": self.wheelhouse}, log=self.log)

    def add_host(self, name: str) -> Host:
        h = self.net.add_host(name)
        self.services[name] = ServiceManager(h, self.net.prefix)
        return h

    def close(self) -> None:
        """Stop the loads and remove the hosts (everything: :meth:`Network.close`)."""
        for ld in self.loads:
            if ld.daemon.alive():
                ld.daemon.kill()
        self.net.close()

    # -- operator's steps
    def copy_source(self, repo_root: str) -> None:
        """The build machine's checkout: the files the wheel is built from, copied (the build writes
        ``build/`` and ``*.egg-info`` beside them, never into the developer's tree)."""
        os.makedirs(self.source_dir, exist_ok=True)
        os.makedirs(self.wheelhouse, exist_ok=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
        for f in SOURCE_FILES:
            src = os.path.join(repo_root, f)
            dst = os.path.join(self.source_dir, f)
            if os.path.isdir(src):
                shutil.copytree(src, dst, ignore=ignore)
            else:
                shutil.copy2(src, dst)

    def copy_description(self, text: str | None = None, hosts: list[str] | None = None) -> None:
        """Put the description on hosts as ``/etc/qjournal/cluster.toml`` (an operator's scp)."""
        data = text if text is not None else self.description_text
        for name in hosts or list(self.net.hosts):
            path = self.net.host(name).path(layout.DESCRIPTION_FILE)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(data)

    def run(self, block_id: str, hosts: list[str] | None = None, **env: str) -> dict[str, str]:
        """Run a block of docs/deploy.md (timed)."""
        t0 = time.monotonic()
        try:
            return self.runbook.run(block_id, hosts, env)
        finally:
            self.timings.append((block_id if hosts is None else f"{block_id}@{','.join(hosts)}",
                                 time.monotonic() - t0))

    def resolve(self, on: str) -> list[str]:
        """``on=`` of a block: ``all``, ``role:ROLE`` or host names, comma-separated; description order."""
        names: list[str] = []
        for item in on.split(","):
            item = item.strip()
            if item == "all":
                got = list(self.desc.hosts)
            elif item.startswith("role:"):
                got = [h.name for h in self.desc.with_role(item[5:])]
            elif item in self.net.hosts:
                got = [item]
            else:
                raise HostsError(f"on={on}: {item!r} is no host, role:ROLE or all")
            names += [n for n in got if n not in names]
        return names

    # -- observing
    def qjournal(self, host: str, *args: str, check: bool = True, timeout_s: float = 60.0):
        """``/opt/qjournal/bin/qjournal --conf /etc/qjournal ARGS`` on ``host``."""
        return self.net.host(host).run([layout.PROGRAM, "--conf", layout.CONF_DIR, *args], check=check,
                                       timeout_s=timeout_s)

    def namenode_states(self, via: str) -> dict[str, str]:
        """``haadmin -getAllServiceState`` from host ``via``: NameNode id -> state (``unreachable``...)."""
        out = self.qjournal(via, "haadmin", "-getAllServiceState", check=False).stdout
        by_addr = {f"{h.name}:{self.desc.ports['namenode-rpc']}": h.namenode_id
                   for h in self.desc.with_role("namenode") + self.desc.with_role("observer")}
        states = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in by_addr:
                states[str(by_addr[parts[0]])] = " ".join(parts[1:])
        return states

    def active_namenode(self, via: str) -> str | None:
        act = [nn for nn, st in self.namenode_states(via).items() if st == "active"]
        return act[0] if len(act) == 1 else None

    def host_of_namenode(self, nn_id: str) -> str:
        for h in self.desc.hosts.values():
            if h.namenode_id == nn_id:
                return h.name
        raise HostsError(f"no host runs NameNode {nn_id}")

    # -- client loads
    def start_load(self, host: str, clients: int = 2, seed: int = 0, call_mean_ms: float = 50.0) -> None:
        """Run ``python -m qjournal.hosts.load run`` on ``host`` (from the installed package)."""
        name = f"{host}l{self.loads_started}"
        self.loads_started += 1
        out_inside = f"{layout.LOG_DIR}/load-{name}.jsonl"
        d = self.net.host(host).spawn(f"load-{name}", [
            f"{layout.PREFIX}/bin/python", "-m", "qjournal.hosts.load", "--conf", layout.CONF_DIR, "run",
            "--name", name, "--clients", str(clients), "--seed", str(seed), "--call-mean-ms", str(call_mean_ms),
            "--out", out_inside], log_path=self.net.host(host).path(f"{layout.LOG_DIR}/load-{name}.log"),
            ready_timeout_s=60.0)
        self.loads.append(_Load(host, name, out_inside, d))

    def stop_loads(self) -> list[list[Event]]:
        """SIGTERM every load, wait for it, and read what each recorded.

        Raises:
            HostsError: a load exited with an error (its log's tail named).
        """
        for ld in self.loads:
            ld.daemon.signal(signal.SIGTERM)
        parts = []
        for ld in self.loads:
            try:  # one SIGTERM only: a second one could land after the load's handler is gone
                rc = ld.daemon.proc.wait(timeout=90.0)
            except subprocess.TimeoutExpired:
                ld.daemon.kill()
                rc = ld.daemon.proc.returncode
            if rc != 0:
                raise HostsError(f"load {ld.name} on {ld.host} exited with {rc}; see {ld.daemon.log_path}")
            parts.append(self._read_events(ld.host, ld.out_inside))
        self.loads = []
        return parts

    def snapshot(self, via: str) -> list[Event]:
        """A probe write, a roll, and the active's whole namespace (``load snapshot`` on ``via``)."""
        out_inside = f"{layout.LOG_DIR}/snapshot-{time.monotonic_ns()}.jsonl"
        self.net.host(via).run([f"{layout.PREFIX}/bin/python", "-m", "qjournal.hosts.load", "--conf",
                                layout.CONF_DIR, "snapshot", "--out", out_inside], timeout_s=120)
        return self._read_events(via, out_inside)

    def _read_events(self, host: str, inside: str) -> list[Event]:
        with open(self.net.host(host).path(inside)) as f:
            return [event_from_jsonable(json.loads(line)) for line in f if line.strip()]

    @staticmethod
    def history(parts: list[list[Event]]) -> History:
        return merge_histories(parts)

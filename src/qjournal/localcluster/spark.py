"""A local Spark standalone cluster (master and workers) from the pyspark package's own jars.

Why: the pipeline's cluster mode (executors fetching segments themselves,
output on a file system every worker shares) can only be tried against a real
master and real workers; ``pip install pyspark`` ships the jars but not
Spark's ``sbin`` scripts. This starts ``org.apache.spark.deploy.master.Master``
and ``...worker.Worker`` with ``java -cp <pyspark>/jars/*`` on loopback ports,
as ``qjournal spark up|down|status`` (and the tests) need, with pids, URLs and
logs in one run directory.

Theory of operation:

* ``up`` picks free ports, starts the master (``SPARK_HOME`` = the pyspark
  directory), waits until its web UI answers ``/json``, starts the workers and
  waits until the master lists that many ``ALIVE`` workers; then writes
  ``<run>/spark.json`` (master URL, web URLs, pids, logs). Each process is
  recorded in the state file as soon as it is started, so a failed ``up`` can
  still be torn down.
* ``hide`` (root, util-linux ``unshare``): each worker runs in its own mount
  namespace with every given directory covered by an empty tmpfs, so the
  executors it starts cannot read what the driver keeps there: a check, on one
  machine, that a run needs nothing but the journal's network endpoints and a
  shared output directory.
* ``down`` sends SIGTERM to the workers then the master, SIGKILL after a
  deadline, and returns only when none is alive. A pid is signalled only
  while its command line still names a Spark daemon (pid reuse guard).

Invariants:

1. ``down`` returns only when no recorded process is alive (else it raises).
2. The state file is rewritten atomically after every change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Callable

from qjournal.errors import QJournalError
from qjournal.ha.zookeeper import free_ports
from qjournal.util.fs import atomic_write
from qjournal.util.proc import kill_after, pid_alive, read_cmdline, read_last_lines

__all__ = ["SparkCluster", "SparkClusterError", "SPARK_STATE_FILE", "pyspark_home"]

SPARK_STATE_FILE = "spark.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: heap of the master and worker daemons themselves (executors are sized by the application)
DAEMON_HEAP = "-Xmx256m"
#: how often a starting daemon's state is polled (its JSON endpoint; never a sleep as synchronisation)
_POLL_S = 0.2


class SparkClusterError(QJournalError):
    """The local Spark cluster could not be started, inspected or stopped (names the process / run dir)."""


def pyspark_home() -> str:
    """The installed pyspark package directory (its ``jars/`` and ``bin/``).

    Raises:
        SparkClusterError: pyspark is not installed.
    """
    try:
        import pyspark  # noqa: PLC0415 - an optional heavy dependency, imported where used
    except ImportError as e:
        raise SparkClusterError(f"pyspark is not installed: {e}") from None
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def scala_version(home: str) -> str:
    """The Scala binary version of the jars (``spark-core_<version>-*.jar``).

    Raises:
        SparkClusterError: no ``spark-core`` jar under ``<home>/jars``.
    """
    for name in sorted(os.listdir(os.path.join(home, "jars"))):
        m = re.match(r"spark-core_(\d+\.\d+)-", name)
        if m:
            return m.group(1)
    raise SparkClusterError(f"no spark-core jar in {home}/jars", path=home)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise SparkClusterError("no java found (set JAVA_HOME or put java on PATH)")
    return java


@dataclass
class SparkProcess:
    """One daemon as recorded in the state file."""

    name: str
    argv: list[str]
    log: str
    pid: int | None = None
    web_url: str = ""

    def alive(self) -> bool:
        if self.pid is None or not pid_alive(self.pid):
            return False
        cmd = read_cmdline(self.pid) or []
        return any(b"org.apache.spark.deploy" in part for part in cmd)


@dataclass
class SparkState:
    """The state file: master URL and every process."""

    master_url: str = ""
    web_url: str = ""
    hidden: list[str] = field(default_factory=list)
    procs: list[SparkProcess] = field(default_factory=list)


def fetch_json(url: str, timeout_s: float = 2.0) -> dict | None:
    """GET ``url`` and parse JSON; None when it does not answer (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


class SparkCluster:
    """A standalone master and ``workers`` workers rooted at ``run_dir``.

    Args:
        run_dir: configuration-free run directory (state file, logs, worker dirs).
        workers: how many workers.
        worker_cores / worker_memory: what each worker offers (``--cores``, ``--memory``).
        hide: directories each worker must not see (module docstring; needs root).
        out: progress printer.
    """

    def __init__(self, run_dir: str, workers: int = 1, worker_cores: int | None = None,
                 worker_memory: str = "2g", hide: list[str] | None = None,
                 out: Callable[[str], None] = print) -> None:
        if workers < 1:
            raise SparkClusterError(f"--workers {workers}: at least one worker")
        self.run_dir = os.path.abspath(run_dir)
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.hide = [os.path.abspath(d) for d in (hide or [])]
        self.out = out
        self.state = SparkState(hidden=list(self.hide))

    # ------------------------------------------------------------------ state file
    @property
    def state_path(self) -> str:
        return os.path.join(self.run_dir, SPARK_STATE_FILE)

    def _save(self) -> None:
        atomic_write(self.state_path, json.dumps(asdict(self.state), indent=1).encode(), sync=False)

    @classmethod
    def open(cls, run_dir: str, out: Callable[[str], None] = print) -> "SparkCluster":
        """The cluster recorded in ``run_dir``.

        Raises:
            SparkClusterError: no (readable) state file there.
        """
        c = cls(run_dir, out=out)
        try:
            with open(c.state_path, "rb") as f:
                raw = json.loads(f.read())
        except (OSError, ValueError) as e:
            raise SparkClusterError(f"no Spark cluster state in {c.run_dir} ({e}); start one with "
                                    f"`qjournal spark up --run-dir {run_dir}`", path=c.state_path) from None
        c.state = SparkState(raw.get("master_url", ""), raw.get("web_url", ""), list(raw.get("hidden", [])),
                             [SparkProcess(**p) for p in raw.get("procs", [])])
        c.workers = sum(1 for p in c.state.procs if p.name.startswith("worker"))
        return c

    # ------------------------------------------------------------------ up
    def up(self, ready_timeout_s: float = 90.0) -> None:
        """Start the master, then the workers; wait until every worker registered.

        Raises:
            SparkClusterError: already running, a daemon died, or the deadline passed
                (whatever started is stopped again).
        """
        if os.path.exists(self.state_path) and any(p.alive() for p in SparkCluster.open(self.run_dir).state.procs):
            raise SparkClusterError(f"a Spark cluster is already running from {self.run_dir}: "
                                    f"`qjournal spark down --run-dir {self.run_dir}` first", path=self.run_dir)
        if self.hide:
            self._check_can_hide()
        os.makedirs(os.path.join(self.run_dir, "logs"), exist_ok=True)
        try:
            self._up(ready_timeout_s)
        except BaseException:
            self.down(quiet=True)
            raise
        self.out(f"spark: master {self.state.master_url} (web {self.state.web_url}), "
                 f"{self.workers} worker(s) registered")

    def _check_can_hide(self) -> None:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            raise SparkClusterError("--hide needs root and util-linux unshare (a mount namespace per worker)")
        for d in self.hide:
            if not os.path.isdir(d):
                raise SparkClusterError(f"--hide {d}: not a directory", path=d)
            if d == self.run_dir or self.run_dir.startswith(d + os.sep):
                raise SparkClusterError(f"--hide {d} would hide the Spark run directory {self.run_dir}", path=d)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        home = pyspark_home()
        env["SPARK_HOME"] = home
        # what bin/load-spark-env.sh would export: the worker builds each executor's command
        # line from it (a pip-installed pyspark has no RELEASE file to find the jars by)
        env.setdefault("SPARK_SCALA_VERSION", scala_version(home))
        return env

    def _start(self, name: str, argv: list[str], web_url: str) -> SparkProcess:
        log = os.path.join(self.run_dir, "logs", f"{name}.log")
        with open(log, "ab") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self._env(), cwd=self.run_dir, start_new_session=True)
        rec = SparkProcess(name, argv, log, proc.pid, web_url)
        self.state.procs.append(rec)
        self._save()
        return rec

    def _wait(self, what: str, cond: Callable[[], bool], deadline: float) -> None:
        while not cond():
            dead = [p for p in self.state.procs if not p.alive()]
            if dead:
                tail = "\n".join(read_last_lines(dead[0].log, 20)) if os.path.exists(dead[0].log) else ""
                raise SparkClusterError(f"{dead[0].name} exited while waiting for {what}; last log lines:\n{tail}")
            if time.monotonic() > deadline:
                raise SparkClusterError(f"timed out waiting for {what} (logs in {self.run_dir}/logs)")
            time.sleep(_POLL_S)

    def _up(self, ready_timeout_s: float) -> None:
        deadline = time.monotonic() + ready_timeout_s
        java = _java()
        cp = os.path.join(pyspark_home(), "jars", "*")
        port, web, *worker_webs = free_ports(2 + self.workers)
        self.state.master_url = f"spark://127.0.0.1:{port}"
        self.state.web_url = f"http://127.0.0.1:{web}"
        self._start("master", [java, DAEMON_HEAP, "-cp", cp, MASTER_CLASS, "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(web)], self.state.web_url)
        self._wait("the master's web UI", lambda: fetch_json(self.state.web_url + "/json") is not None, deadline)
        prefix: list[str] = []
        if self.hide:
            script = ('while [ "$1" != -- ]; do mount -t tmpfs qjournal-hidden "$1" || exit 97; shift; done; '
                      'shift; exec "$@"')
            prefix = ["unshare", "--mount", "sh", "-c", script, "sh", *self.hide, "--"]
        for i, wport in enumerate(worker_webs, start=1):
            work = os.path.join(self.run_dir, f"worker{i}")
            os.makedirs(work, exist_ok=True)
            argv = [java, DAEMON_HEAP, "-cp", cp, WORKER_CLASS, "--host", "127.0.0.1", "--webui-port", str(wport),
                    "--work-dir", work, "--memory", self.worker_memory]
            if self.worker_cores:
                argv += ["--cores", str(self.worker_cores)]
            self._start(f"worker{i}", prefix + argv + [self.state.master_url], f"http://127.0.0.1:{wport}")
        self._wait(f"{self.workers} worker(s) to register with the master",
                   lambda: len(self.alive_workers()) >= self.workers, deadline)

    # ------------------------------------------------------------------ inspect
    def master_json(self) -> dict | None:
        """The master's ``/json`` (workers, active and completed applications), or None."""
        return fetch_json(self.state.web_url + "/json") if self.state.web_url else None

    def alive_workers(self) -> list[dict]:
        m = self.master_json() or {}
        return [w for w in m.get("workers", []) if w.get("state") == "ALIVE"]

    def worker_json(self, name: str) -> dict | None:
        """A worker's own ``/json`` (its running and finished executors), or None."""
        rec = next((p for p in self.state.procs if p.name == name), None)
        return fetch_json(rec.web_url + "/json") if rec and rec.web_url else None

    def format_status(self) -> str:
        lines = [f"master {self.state.master_url}   web {self.state.web_url}"]
        if self.state.hidden:
            lines.append(f"hidden from the workers: {', '.join(self.state.hidden)}")
        lines.append(f"{'NAME':10s} {'PID':>8s} {'ALIVE':6s} WEB")
        for p in self.state.procs:
            lines.append(f"{p.name:10s} {p.pid or '-':>8} {'yes' if p.alive() else 'no':6s} {p.web_url}")
        m = self.master_json()
        if m is None:
            lines.append("master: not answering")
        else:
            lines.append(f"workers alive: {len(self.alive_workers())}; cores {m.get('coresused', 0)}/"
                         f"{m.get('cores', 0)} used; applications: {len(m.get('activeapps', []))} active, "
                         f"{len(m.get('completedapps', []))} completed")
            for a in m.get("activeapps", []) + m.get("completedapps", []):
                lines.append(f"  {a.get('id')} {a.get('state')} cores={a.get('cores')} {a.get('name')}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ down
    def down(self, timeout_s: float = 20.0, quiet: bool = False) -> None:
        """Stop the workers, then the master (invariant 1).

        Raises:
            SparkClusterError: a process survived SIGKILL.
        """
        workers = [p for p in self.state.procs if p.name != "master"]
        masters = [p for p in self.state.procs if p.name == "master"]
        for group in (workers, masters):
            for p in group:
                if p.alive():
                    try:
                        os.kill(p.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + timeout_s
            for p in group:
                kill_after(p.pid, p.alive, deadline)
        left = [f"{p.name} (pid {p.pid})" for p in self.state.procs if p.alive()]
        if os.path.isdir(self.run_dir):
            self._save()
        if left:
            raise SparkClusterError(f"processes still running after down: {', '.join(left)}")
        if not quiet:
            self.out(f"spark: down; nothing left running from {self.run_dir}")

"""Start and stop qjournal daemons as real processes, waiting on their READY line.

Why: tests, benchmarks, the chaos harness and the cluster launcher all start
``qjournal journalnode|namenode|zkfc`` processes. Each daemon prints one line
``READY {json}`` on stdout once it serves (docs/architecture.md, "Process
conventions"). Waiting for that line with a deadline is the only honest way to
know a process is up: no sleeps, no port polling races.

The small process probes the launcher, the ZooKeeper ensemble and pid fencing
share (:func:`pid_alive`, :func:`read_cmdline`, :func:`read_last_lines`) live
here too, below all of them, and the process's garbage-collector policy
(:func:`freeze_startup_objects`, :func:`gc_paused`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator


class DaemonStartError(RuntimeError):
    """A daemon exited or stayed silent before printing READY."""


@dataclass
class Daemon:
    """A running daemon process and what it announced."""

    name: str
    proc: subprocess.Popen
    ready: dict = field(default_factory=dict)
    log_path: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.alive():
            self.proc.kill()
        self.proc.wait()

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Returns the exit code."""
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # a paused process cannot exit
            except ProcessLookupError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def qjournal_argv(*args: str) -> list[str]:
    """argv running the ``qjournal`` command with this interpreter."""
    return [sys.executable, "-m", "qjournal", *args]


def start_daemon(name: str, argv: list[str], *, log_path: str | None = None,
                 env: dict | None = None, ready_timeout_s: float = 30.0,
                 cwd: str | None = None) -> Daemon:
    """Start ``argv`` and wait for its ``READY {json}`` stdout line.

    stderr goes to ``log_path`` (or is inherited). stdout lines after READY are
    drained into the same log by nobody: daemons print only the READY line.

    Raises:
        DaemonStartError: the process exited, or no READY line before the deadline;
            the message includes the tail of its log.
    """
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        full_env.update(env)
    err = open(log_path, "ab") if log_path else None
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err or None,
                                env=full_env, cwd=cwd, start_new_session=True)
    finally:
        if err:
            err.close()
    d = Daemon(name, proc, log_path=log_path)
    deadline = time.monotonic() + ready_timeout_s
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                d.kill()
                raise DaemonStartError(f"{name}: no READY line within {ready_timeout_s}s"
                                       f"{_log_tail(log_path)}")
            if not sel.select(timeout=min(left, 0.5)):
                if proc.poll() is not None:
                    raise DaemonStartError(f"{name}: exited with {proc.returncode} before READY"
                                           f"{_log_tail(log_path)}")
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                proc.wait()
                raise DaemonStartError(f"{name}: exited with {proc.returncode} before READY"
                                       f"{_log_tail(log_path)}")
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace").strip()
                if text.startswith("READY"):
                    payload = text[len("READY"):].strip()
                    d.ready = json.loads(payload) if payload else {}
                    return d
    finally:
        sel.close()


def _log_tail(path: str | None, lines: int = 20) -> str:
    if not path:
        return ""
    try:
        tail = read_last_lines(path, lines)
    except OSError:
        return ""
    return "\n--- last log lines ---\n" + "\n".join(tail)


def read_last_lines(path: str, lines: int) -> list[str]:
    """The last ``lines`` lines of a (log) file, decoded leniently as UTF-8.

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace").splitlines()[-lines:]


def pid_alive(pid: int) -> bool:
    """True if ``pid`` names a live (non-zombie) process on this machine."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # state is the field after the parenthesised command name
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
    return state not in ("Z", "X")


def read_cmdline(pid: int) -> list[bytes] | None:
    """The argv of process ``pid`` from ``/proc`` (guards against pid reuse), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def kill_after(pid: int, alive, deadline: float, reap=None, kill_wait_s: float = 5.0) -> None:
    """Wait (polling ``alive()``) for a process already asked to stop until ``deadline``
    (``time.monotonic()``), then SIGKILL it and wait up to ``kill_wait_s`` more.

    Args:
        pid: the process.
        alive: whether it still runs (a pid-reuse-guarded check of the caller's).
        deadline: when to stop waiting for it to exit by itself.
        reap: called while waiting (a parent reaps its child so it does not stay a zombie).
    """
    def wait(until: float) -> None:
        while alive() and time.monotonic() < until:
            if reap is not None:
                reap()
            time.sleep(0.02)
    wait(deadline)
    if alive():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait(time.monotonic() + kill_wait_s)


#: a daemon's young-generation threshold of the cyclic garbage collector (CPython's default: 700)
GC_YOUNG_THRESHOLD = 10_000


def freeze_startup_objects() -> None:
    """Collect once, then move every object alive (the modules, a loaded image, ...) out of the
    cyclic garbage collector's sight (``gc.freeze``), and collect the young generation every
    :data:`GC_YOUNG_THRESHOLD` allocations instead of 700; a daemon calls it once it serves.

    Why: each full collection scans every tracked object, and a daemon's start-up objects (its
    imports alone are hundreds of thousands) never become garbage. Measured in
    ``bench/tail_bench.py``: NameNode processes paused 33-58 ms per full collection, which is most
    of a standby's p99 tail lag. Objects made later are collected as usual.
    The threshold: every young collection promotes the objects of the calls in flight (futures,
    frames, buffers), which die soon after but count towards the next full collection. At 700 a
    NameNode serving 64 clients ran a full collection every few thousand creates and spent about
    30% of its CPU in the collector (docs/performance.md, "Commit path"); at 10,000, under 3%.
    Cyclic garbage waits at most that many more allocations to be freed.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (reference counting frees as usual); the
    collector is enabled again on exit unless it was off before.

    Why: a block that makes many long-lived objects and no garbage cycles (edit-log replay: an inode
    per edit) otherwise pays full collections of the whole growing heap as it goes; measured in
    ``bench/replay_bench.py``, four full collections took 0.33 s of a 0.87 s replay of 10^5 edits.
    The collections the block's allocations call for run after it, once.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

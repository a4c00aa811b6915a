"""The real-process chaos harness: JournalNode and writer processes under a seeded fault schedule.

Why, next to the deterministic simulator: the simulator runs the protocol code
on a virtual world; this harness runs the *shipped* programs (``qjournal
journalnode``, ``qjournal log write``, ``qjournal log read``) on real sockets,
real files, real signals, and judges them with the same checker. It catches
what the simulation abstracts away: the daemon's threads and HTTP server,
process start-up, port reuse, real fsync and file-system errors.

Set-up (all on 127.0.0.1, ephemeral ports, one temporary directory):

* ``nodes`` JournalNode processes, each with its own edits directory. One of
  them keeps its edits directory on a small tmpfs mount (a few MiB) when the
  harness runs as root and ``mount`` works; a "disk full" fault then fills that
  mount with a ballast file (writes fail with ENOSPC) and "disk free" deletes
  it. Without root the fault is skipped and the report says so (a size cap
  cannot be imposed on an ordinary directory without root: no quota, no loop
  device).
* One :class:`~qjournal.chaos.proxy.LinkProxy` per JournalNode on the writer's
  path: the journal URI names the proxies, so the harness can delay, black-hole
  or cut each writer-to-node link in either direction. JournalNode-to-
  JournalNode downloads (accept-recovery) go direct.
* Writers are ``qjournal log write`` processes printing ``acked <txid>``; each
  new writer fences the previous one (a takeover).

Fault schedule (seeded ``random.Random``; one action every 0.3-1.5 s):
SIGKILL + restart of a JournalNode (same ports), SIGSTOP/SIGCONT of a
JournalNode, proxy delay / black hole (per direction) / cut / heal, writer
SIGKILL + new writer, writer SIGSTOP + new writer + SIGCONT of the old one
(a paused old active that wakes up fenced), disk full / free, a reader pass.

End: heal everything, restart dead nodes, stop writers, run a final writer
(``log write --count 0``: recover and finalize only), read the whole log with
``log read``, read every node's segment files directly, and check the history
(:mod:`qjournal.sim.checker`; the server-side rules 5 and 7 need observations
only the simulator has and are not judged here).

Invariants:

1. Bounded: every wait has a deadline; the run stops by itself after
   ``duration_s`` plus a bounded end phase.
2. Clean: every process started is killed and reaped, every proxy closed,
   the tmpfs unmounted, in ``finally`` blocks (also on Ctrl-C).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from qjournal.chaos.driver import ChaosProfile, ChaosResult, ChaosSession, run_session
from qjournal.cli.log import record_body
from qjournal.protocol.journal_layout import current_dir
from qjournal.protocol.segment import crc32c, parse_segment_file_name
from qjournal.sim.history import (Acked, EpochGranted, Failure, FinalLog, NodeSegment, Read, Setup, Written,
                                  WriterStarted)
from qjournal.chaos.disk import SmallDisk
from qjournal.chaos.proxy import LinkProxy
from qjournal.util.proc import Daemon, qjournal_argv, start_daemon

__all__ = ["ChaosResult", "run_chaos", "PROFILE"]

JID = "chaos"
RECORD_BYTES = 64
#: client timeouts for every qjournal command the harness runs (short, so faults show)
CLIENT_OVERRIDES = {
    "dfs.qjournal.write-txns.timeout.ms": "3000",
    "dfs.qjournal.start-segment.timeout.ms": "3000",
    "dfs.qjournal.new-epoch.timeout.ms": "5000",
    "dfs.qjournal.prepare-recovery.timeout.ms": "5000",
    "dfs.qjournal.accept-recovery.timeout.ms": "8000",
    "dfs.qjournal.finalize-segment.timeout.ms": "5000",
    "dfs.qjournal.get-journal-state.timeout.ms": "5000",
    "dfs.qjournal.select-input-streams.timeout.ms": "5000",
    "dfs.qjm.operations.timeout": "8000",
    "dfs.qjournal.http.open.timeout.ms": "3000",
    "dfs.qjournal.http.read.timeout.ms": "5000",
    "ipc.client.connect.timeout": "2000",
}
TMPFS_BYTES = 8 * 1024 * 1024
COMMAND_TIMEOUT_S = 60.0
#: the journal's fault schedule (module docstring): kinds by weight, a step every 0.3-1.5 s
PROFILE = ChaosProfile(
    label="chaos", workdir_prefix="qjournal-chaos-", step_s=(0.3, 1.5),
    weights=(("jn_kill", 3), ("jn_restart", 4), ("jn_stop", 2), ("link_delay", 2), ("link_blackhole", 2),
             ("link_cut", 1), ("link_heal", 3), ("writer_kill", 2), ("writer_pause_takeover", 1), ("read", 1),
             ("disk_full", 1), ("disk_free", 1), ("nothing", 4)))


@dataclass
class _Node:
    name: str
    edits_dir: str
    rpc_port: int = 0
    http_port: int = 0
    daemon: Daemon | None = None
    proxy: LinkProxy | None = None
    stopped: bool = False  # SIGSTOPped
    tmpfs: bool = False


@dataclass
class _Writer:
    name: str
    proc: asyncio.subprocess.Process
    epoch: int | None = None
    first_txid: int | None = None
    last_acked: int = 0
    stopped: bool = False
    tasks: list = field(default_factory=list)


class _Chaos(ChaosSession):
    PROFILE = PROFILE

    def __init__(self, seed: int, duration_s: float, nodes: int, workdir: str) -> None:
        super().__init__(seed, duration_s, workdir)
        self.nodes = [_Node(f"jn{i}", os.path.join(workdir, f"jn{i}")) for i in range(nodes)]
        self.writers: list[_Writer] = []
        self.uri = ""
        self.disk: SmallDisk | None = None
        self.epochs: dict[int, str] = {}  # epoch -> writer

    def figures(self) -> dict[str, Any]:
        return {"acked_txid": max((a.txid for a in self.history.of(Acked)), default=0),
                "writers": self.stats.get("writers", 0)}

    def _argv(self, *args: str) -> list[str]:
        argv = qjournal_argv()
        for k, v in sorted(CLIENT_OVERRIDES.items()):
            argv += ["-D", f"{k}={v}"]
        return argv + list(args)

    # -- JournalNodes --------------------------------------------------------------------------
    def _try_mount(self, path: str) -> bool:
        disk = SmallDisk(path, TMPFS_BYTES)
        why = disk.mount()
        if why is not None:
            self.notes.append(f"disk full: skipped ({why})")
            return False
        self.disk = disk
        self.notes.append(f"disk full: jn0's edits dir is a {TMPFS_BYTES >> 20} MiB tmpfs, filled by a "
                          f"ballast file on demand")
        return True

    async def _start_node(self, n: _Node) -> None:
        argv = qjournal_argv("journalnode", "--edits-dir", n.edits_dir,
                             "--rpc-address", f"127.0.0.1:{n.rpc_port}",
                             "--http-address", f"127.0.0.1:{n.http_port}")
        log_path = os.path.join(self.workdir, f"{n.name}.log")
        try:
            d = await asyncio.to_thread(start_daemon, n.name, argv, log_path=log_path,
                                        ready_timeout_s=30.0)
        except Exception:  # port reuse refused: come back on new ports
            if not n.rpc_port:
                raise
            n.rpc_port = n.http_port = 0
            return await self._start_node(n)
        n.daemon = d
        n.stopped = False
        host, port = d.ready["rpc"].rsplit(":", 1)
        n.rpc_port = int(port)
        n.http_port = int(d.ready["http"].rsplit(":", 1)[1])
        if n.proxy is not None:
            n.proxy.retarget("127.0.0.1", n.rpc_port)

    def _node_alive(self, n: _Node) -> bool:
        return n.daemon is not None and n.daemon.alive()

    # -- writers and readers ---------------------------------------------------------------------
    async def _start_writer(self, final: bool = False) -> _Writer:
        name = "final" if final else f"w{len(self.writers) + 1}"
        count = "0" if final else "100000000"
        batch = str(1 + self.rng.randrange(4))
        argv = self._argv("log", "write", "--journal", self.uri, "--count", count,
                          "--size", str(RECORD_BYTES), "--batch", batch,
                          "--roll-every", str(5 + self.rng.randrange(40)))
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        w = _Writer(name, proc)
        self.history.add(WriterStarted(name))
        w.tasks = [asyncio.ensure_future(self._watch_stdout(w)),
                   asyncio.ensure_future(self._watch_stderr(w))]
        self.writers.append(w)
        self.stat("writers")
        return w

    async def _watch_stdout(self, w: _Writer) -> None:
        assert w.proc.stdout is not None
        while True:
            line = await w.proc.stdout.readline()
            if not line:
                return
            text = line.decode(errors="replace").strip()
            if text.startswith("acked ") and w.epoch is not None and w.first_txid is not None:
                txid = int(text.split()[1])
                for t in range(max(w.first_txid, w.last_acked + 1), txid + 1):
                    self.history.add(Written(w.name, w.epoch, t, record_body(w.epoch, t, RECORD_BYTES)))
                w.last_acked = txid
                self.history.add(Acked(w.name, w.epoch, txid))

    async def _watch_stderr(self, w: _Writer) -> None:
        assert w.proc.stderr is not None
        with open(os.path.join(self.workdir, f"{w.name}.log"), "ab") as logf:
            while True:
                line = await w.proc.stderr.readline()
                if not line:
                    return
                logf.write(line)
                text = line.decode(errors="replace").strip()
                if text.startswith("writer epoch "):
                    parts = text.replace(",", "").split()
                    w.epoch, w.first_txid = int(parts[2]), int(parts[-1])
                    self.epochs[w.epoch] = w.name
                    self.history.add(EpochGranted(w.name, w.epoch))
                elif "InvariantViolation" in text or "Traceback" in text:
                    self.history.add(Failure(w.name, "WriterCrash", text[:300]))

    async def _end_writer(self, w: _Writer, sig: int = signal.SIGKILL) -> None:
        if w.proc.returncode is None:
            try:
                os.killpg(w.proc.pid, sig)
                if w.stopped:
                    os.killpg(w.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(w.proc.wait(), 15)
        except asyncio.TimeoutError:
            os.killpg(w.proc.pid, signal.SIGKILL)
            await w.proc.wait()
        await asyncio.gather(*w.tasks, return_exceptions=True)
        if w.epoch is not None and w.first_txid is not None:
            # the batch after the last ack may have reached some nodes: it was written
            for t in range(max(w.first_txid, w.last_acked + 1), max(w.first_txid, w.last_acked + 1) + 4):
                self.history.add(Written(w.name, w.epoch, t, record_body(w.epoch, t, RECORD_BYTES)))

    def _resolve(self, txid: int, crc: str) -> bytes:
        """The bytes a reader saw, from their CRC: bodies are a function of (epoch, txid)."""
        for epoch in sorted(self.epochs):
            body = record_body(epoch, txid, RECORD_BYTES)
            if f"{crc32c(body):08x}" == crc:
                return body
        return f"<unknown body crc={crc}>".encode()

    async def _read_all(self, name: str) -> list[tuple[int, bytes]] | None:
        argv = self._argv("log", "read", "--journal", self.uri, "--from", "1")
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE,
                                                    start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT_S)
        except asyncio.TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            self.stat("reader_timeout")
            return None
        if proc.returncode != 0:
            self.stat("reader_failed")
            if b"InvariantViolation" in err:
                self.history.add(Failure(name, "InvariantViolation", err.decode(errors="replace")[-300:]))
            self.notes.append(f"{name}: {err.decode(errors='replace').strip()[-200:]}")
            return None
        recs = []
        for line in out.decode().splitlines():
            d = json.loads(line)
            recs.append((int(d["txid"]), self._resolve(int(d["txid"]), d["crc32c"])))
        return recs

    async def _reader(self) -> None:
        name = f"r{self.stats.get('readers', 0) + 1}"
        self.stat("readers")
        recs = await self._read_all(name)
        for txid, body in recs or []:
            self.history.add(Read(name, txid, body))

    # -- faults --------------------------------------------------------------------------------
    async def step(self, kind: str) -> None:
        rng = self.rng
        n = rng.choice(self.nodes)
        if kind == "jn_kill" and self._node_alive(n):
            n.daemon.kill()
            self.fault("jn_kill", n.name)
        elif kind == "jn_restart":
            dead = [x for x in self.nodes if not self._node_alive(x)]
            if dead:
                x = rng.choice(dead)
                await self._start_node(x)
                self.fault("jn_restart", x.name)
        elif kind == "jn_stop" and self._node_alive(n) and not n.stopped:
            n.daemon.signal(signal.SIGSTOP)
            n.stopped = True
            self.fault("jn_sigstop", n.name)

            async def cont(n=n):
                if self._node_alive(n) and n.stopped:
                    n.daemon.signal(signal.SIGCONT)
                    n.stopped = False
            self.later(rng.uniform(0.5, 4.0), cont)
        elif kind == "link_delay":
            d = rng.choice(["up", "down", "both"])
            n.proxy.set_mode(d, "delay", delay_ms=rng.uniform(20, 800))
            self.fault("link_delay", f"{n.name} {d}")
        elif kind == "link_blackhole":
            d = rng.choice(["up", "down", "both"])
            n.proxy.set_mode(d, "blackhole")
            self.fault("link_blackhole", f"{n.name} {d}")
        elif kind == "link_cut":
            n.proxy.cut()
            self.fault("link_cut", n.name)
        elif kind == "link_heal":
            n.proxy.heal()
            self.fault("link_heal", n.name)
        elif kind == "writer_kill":
            live = [w for w in self.writers if w.proc.returncode is None and not w.stopped]
            for w in live:
                await self._end_writer(w)
                self.fault("writer_kill", w.name)
            await self._start_writer()
        elif kind == "writer_pause_takeover":
            live = [w for w in self.writers if w.proc.returncode is None and not w.stopped]
            if live:
                old = live[-1]
                os.killpg(old.proc.pid, signal.SIGSTOP)
                old.stopped = True
                new = await self._start_writer()
                self.fault("writer_pause_takeover", f"{old.name} paused, {new.name} takes over")

                async def wake(old=old):
                    if old.proc.returncode is None and old.stopped:
                        os.killpg(old.proc.pid, signal.SIGCONT)
                        old.stopped = False
                self.later(rng.uniform(2.0, 6.0), wake)
        elif kind == "read":
            self.tasks.append(asyncio.ensure_future(self._reader()))
            self.fault("read")
        elif kind == "disk_full" and self.disk is not None and not self.disk.full:
            if await asyncio.to_thread(self.disk.fill):
                self.fault("disk_full", "jn0")
            else:  # jn0's own segments already filled the tmpfs: it is full without a ballast
                self.fault("disk_full", "jn0 (already full)")
        elif kind == "disk_free" and self.disk is not None and self.disk.full:
            self.disk.free()
            self.fault("disk_free", "jn0")
        if not any(w.proc.returncode is None for w in self.writers):
            await self._start_writer()

    # -- the run ---------------------------------------------------------------------------------
    async def setup(self) -> None:
        for i, n in enumerate(self.nodes):
            if i == 0:
                n.tmpfs = self._try_mount(n.edits_dir)
            os.makedirs(n.edits_dir, exist_ok=True)
            await self._start_node(n)
            n.proxy = LinkProxy("127.0.0.1", n.rpc_port, name=n.name)
            await n.proxy.start()
        self.uri = "qjournal://" + ";".join(f"127.0.0.1:{n.proxy.port}" for n in self.nodes) + f"/{JID}"
        self.history.add(Setup(tuple(n.name for n in self.nodes)))
        for attempt in range(3):  # set-up, not under test: default timeouts, a retry on a busy machine
            args = ["log", "format", "--journal", self.uri] + (["--force"] if attempt else [])
            fmt = await asyncio.create_subprocess_exec(*qjournal_argv(*args),
                                                       stdout=asyncio.subprocess.DEVNULL,
                                                       stderr=asyncio.subprocess.PIPE)
            _, err = await asyncio.wait_for(fmt.communicate(), 2 * COMMAND_TIMEOUT_S)
            if fmt.returncode == 0:
                break
            self.notes.append(f"log format attempt {attempt + 1} failed: {err.decode().strip()[-300:]}")
        else:
            raise RuntimeError(f"chaos: log format failed: {self.notes[-1]}")
        await self._start_writer()

    async def end(self) -> None:
        await self.cancel_scheduled()
        for w in self.writers:
            await self._end_writer(w)
        if self.disk is not None:
            self.disk.free()
        for n in self.nodes:
            n.proxy.heal()
            if self._node_alive(n) and n.stopped:
                n.daemon.signal(signal.SIGCONT)
                n.stopped = False
            if not self._node_alive(n):
                await self._start_node(n)
        for attempt in range(3):
            w = await self._start_writer(final=True)
            try:
                await asyncio.wait_for(w.proc.wait(), COMMAND_TIMEOUT_S)
            except asyncio.TimeoutError:
                pass
            await self._end_writer(w)
            if w.proc.returncode == 0:
                break
        else:
            self.history.add(Failure("final writer", "NoRecovery", "no recovery on a healed cluster"))
        recs = await self._read_all("final-reader")
        if recs is None:
            self.history.add(Failure("final reader", "NoRead", "; ".join(self.notes[-1:])))
        else:
            first = recs[0][0] if recs else 1
            self.history.add(FinalLog(first, tuple(b for _, b in recs)))
        for n in self.nodes:
            cur = current_dir(n.edits_dir, JID)
            for fname in sorted(os.listdir(cur)) if os.path.isdir(cur) else []:
                p = parse_segment_file_name(fname)
                if p is None:
                    continue
                with open(os.path.join(cur, fname), "rb") as f:
                    data = f.read()
                self.history.add(NodeSegment(n.name, p.start_txid,
                                             p.end_txid if p.end_txid is not None else -1,
                                             p.end_txid is None, data))

    async def cleanup(self) -> None:
        for w in self.writers:
            if w.proc.returncode is None:
                try:
                    os.killpg(w.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await w.proc.wait()
        for n in self.nodes:
            if n.daemon is not None:
                if n.daemon.alive():
                    n.daemon.signal(signal.SIGCONT)
                n.daemon.kill()
            if n.proxy is not None:
                await n.proxy.stop()
        if self.disk is not None:
            self.disk.unmount()


async def run_chaos(duration_s: float, seed: int, nodes: int = 3, workdir: str | None = None) -> ChaosResult:
    """Run one chaos session (module docstring) and check it.

    Args:
        duration_s: length of the faulty phase in seconds (the end phase adds a
            bounded amount).
        seed: seed of the fault schedule.
        nodes: JournalNodes (3 or 5).
        workdir: keep files there (default: a temporary directory removed at the end).

    Returns:
        The result with the history and the violations.
    """
    return await run_session(lambda wd: _Chaos(seed, duration_s, nodes, wd), PROFILE, seed, duration_s, workdir)

"""The end-to-end demo (``qjournal demo``, ``make demo``): automatic failover under load, verified.

Why it exists: it is the one command that shows the whole system doing its job
on real processes: a local HA cluster (ZooKeeper, three JournalNodes, two
NameNodes, two ZKFCs), a client workload, a SIGKILL of the active NameNode, the
standby taking over by itself, the killed node coming back as the new standby,
and a check that every acknowledged operation survived and nothing else appeared.

Theory of operation:

* ``writers`` client tasks each own a directory ``/demo/w<i>`` and create files
  ``f<seq>`` in it, one call at a time, through :class:`~qjournal.namenode.dfs_client.DFSClient`
  (which fails over between the NameNodes by itself). A file is *acknowledged*
  when ``create`` returned; at most one call per writer is *in flight* at any
  time.
* The oracle (seed 000 §1.3.2, requirements 1 and 2): after the run, reading
  back from the new active, every acknowledged file must exist (no loss) and
  every existing file must have been attempted (nothing invented). An in-flight
  call that never returned may or may not be there.
* Every wait has a deadline; progress is printed while waiting; the cluster is
  torn down in ``finally``.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from qjournal.config.conf import Configuration
from qjournal.localcluster.launcher import LocalCluster, NN_IDS
from qjournal.namenode.dfs_client import DFSClient

__all__ = ["run_demo", "WorkloadStats"]


@dataclass
class WorkloadStats:
    """What the writers did: acknowledged and attempted paths, and ack timestamps."""

    acked: dict[str, list[str]] = field(default_factory=dict)      # dir -> names acknowledged
    attempted: dict[str, list[str]] = field(default_factory=dict)  # dir -> names attempted
    ack_times: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, NameNode id) of every ack
    errors: list[str] = field(default_factory=list)

    @property
    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())


async def _writer(conf, i: int, stats: WorkloadStats, stop: asyncio.Event) -> None:
    d = f"/demo/w{i}"
    stats.acked[d], stats.attempted[d] = [], []
    async with DFSClient(conf) as client:
        await client.mkdirs(d)
        seq = 0
        while not stop.is_set():
            name = f"f{seq:06d}"
            stats.attempted[d].append(name)
            try:
                await client.create(f"{d}/{name}")
            except Exception as e:  # the client gave up after its failover attempts
                stats.errors.append(f"{d}/{name}: {type(e).__name__}: {e}")
                await asyncio.sleep(0.05)
                seq += 1
                continue
            stats.acked[d].append(name)
            stats.ack_times.append((time.monotonic(), client.addresses[client.current][0]))
            seq += 1


async def _reporter(stats: WorkloadStats, stop: asyncio.Event, out: Callable[[str], None],
                    phase: dict) -> None:
    last_n, last_t = 0, time.monotonic()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
        n, t = stats.total_acked, time.monotonic()
        out(f"  [{phase['name']:<10}] {(n - last_n) / (t - last_t):8.0f} ops/s   {n:7d} acknowledged")
        last_n, last_t = n, t


async def _verify(conf, stats: WorkloadStats, out: Callable[[str], None]) -> list[str]:
    problems: list[str] = []
    async with DFSClient(conf) as client:
        for d in sorted(stats.acked):
            listing = await client.list_status(d)
            present = sorted(e["name"] for e in listing)
            present_set = set(present)
            missing = [n for n in stats.acked[d] if n not in present_set]
            attempted = set(stats.attempted[d])
            invented = [n for n in present if n not in attempted]
            unacked_present = len(present_set) - len(stats.acked[d]) + len(missing)
            if missing:
                problems.append(f"{d}: {len(missing)} acknowledged files LOST, e.g. {missing[:5]}")
            if invented:
                problems.append(f"{d}: {len(invented)} files that were never written, e.g. {invented[:5]}")
            out(f"  {d}: {len(stats.acked[d])} acknowledged, {len(present)} present "
                f"({unacked_present} in-flight at the crash and kept)")
    return problems


async def run_demo(run_dir: str | None = None, writers: int = 4, before_s: float = 4.0, after_s: float = 4.0,
                   zk_servers: int = 1, session_timeout_ms: int = 2000, keep: bool = False,
                   out: Callable[[str], None] = print, secure: bool = False) -> int:
    """Run the demo. Returns 0 on success, 1 if any check failed (after printing why).

    Args:
        run_dir: the cluster's run directory (default: a fresh temporary directory).
        writers: concurrent client writers.
        before_s / after_s: workload time before the kill and after the takeover.
        zk_servers: ZooKeeper ensemble size.
        session_timeout_ms: ZKFC session timeout.
        keep: keep the run directory (logs) afterwards.
        out: where progress goes.
        secure: a secure cluster (``cluster up --secure``); the writers are its administrator.
    """
    tmp = None
    if run_dir is None:
        tmp = run_dir = tempfile.mkdtemp(prefix="qjournal-demo-")
    cluster = LocalCluster(run_dir, zk_servers=zk_servers, session_timeout_ms=session_timeout_ms,
                           out=lambda s: out("  " + s), secure=secure)
    t_start = time.monotonic()
    ok = False
    try:
        out("== 1. bringing up a local HA cluster: ZooKeeper, 3 JournalNodes, 2 NameNodes, 2 ZKFCs"
            + (" (secure: mutual TLS everywhere, service-level authorization, ZooKeeper digest ACLs)"
               if secure else ""))
        await asyncio.to_thread(cluster.up)
        out(cluster.format_status())
        conf = Configuration.load(cluster.conf_dir)

        out(f"\n== 2. client workload: {writers} writers creating files")
        stats = WorkloadStats()
        stop = asyncio.Event()
        phase = {"name": "steady"}
        tasks = [asyncio.create_task(_writer(conf, i, stats, stop)) for i in range(writers)]
        reporter = asyncio.create_task(_reporter(stats, stop, out, phase))
        try:
            await asyncio.sleep(before_s)  # let the workload run: this is the demo's duration, not a sync
            victim = await asyncio.to_thread(cluster.active_namenode)
            if victim is None:
                out("FAIL: no single active NameNode before the kill")
                return 1
            survivor = [n for n in NN_IDS if n != victim][0]

            out(f"\n== 3. SIGKILL of the active NameNode {victim} "
                f"(pid {cluster.procs[victim].pid})")
            phase["name"] = "failover"
            acked_before = stats.total_acked
            t_kill = time.monotonic()
            await asyncio.to_thread(cluster.kill, victim, signal.SIGKILL)

            def progress(elapsed: float, _last=[0.0]) -> None:
                if elapsed - _last[0] >= 0.5:
                    _last[0] = elapsed
                    out(f"  ... waiting for {survivor} to take over ({elapsed:.1f}s)")
            await asyncio.to_thread(cluster.wait_for_active, 60.0, victim, progress)
            t_active = time.monotonic()
            first_ack = next((t for t, nn in stats.ack_times[acked_before:] if nn == survivor), None)
            while first_ack is None and time.monotonic() - t_active < 30:
                await asyncio.sleep(0.02)  # the writers are retrying; wait for their first ack
                first_ack = next((t for t, nn in stats.ack_times[acked_before:] if nn == survivor), None)
            out(f"  {survivor} is ACTIVE {t_active - t_kill:.2f}s after the kill "
                f"(ZooKeeper session timeout {session_timeout_ms} ms)")
            if first_ack is not None:
                out(f"  first client write acknowledged by {survivor} {first_ack - t_kill:.2f}s after the kill")
            phase["name"] = "new active"
            await asyncio.sleep(after_s / 2)  # workload time on the new active

            out(f"\n== 4. restarting {victim}: it comes back as the new standby")
            phase["name"] = "restart"
            await asyncio.to_thread(cluster.restart, victim)
            deadline = time.monotonic() + 60
            while True:
                states = await asyncio.to_thread(cluster.nn_states)
                if (states.get(victim) or {}).get("state") == "standby":
                    break
                if time.monotonic() > deadline:
                    out(f"FAIL: {victim} did not come back as standby: {states}")
                    return 1
                await asyncio.sleep(0.1)  # status poll interval
            out(f"  {victim} is STANDBY; {survivor} stays ACTIVE")
            phase["name"] = "steady"
            await asyncio.sleep(after_s / 2)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await reporter
        out(cluster.format_status())

        out("\n== 5. verifying every acknowledged operation on the new active")
        problems = await _verify(conf, stats, out)
        if stats.errors:
            out(f"  {len(stats.errors)} client calls gave up (not acknowledged), e.g. {stats.errors[:2]}")
        if problems:
            for p in problems:
                out("FAIL: " + p)
            return 1
        out(f"  OK: all {stats.total_acked} acknowledged files are present, nothing else was invented")
        ok = True
        return 0
    finally:
        out("\n== 6. tearing the cluster down")
        try:
            await asyncio.to_thread(cluster.down)
        except Exception as e:
            out(f"FAIL: teardown: {e}")
            ok = False
        if tmp is not None and not keep and ok:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            out(f"  logs kept in {tmp}")
        out(f"demo finished in {time.monotonic() - t_start:.1f}s: {'SUCCESS' if ok else 'FAILED'}")


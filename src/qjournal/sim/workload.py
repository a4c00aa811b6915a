"""The simulated workload: writers that take over from each other, readers, and a fault director.

Why: the correctness requirements (PRODUCT.md, seed 000 §1.3.2) are about what
happens when writers crash and are replaced while JournalNodes crash, disks
tear and fill, and messages are lost. This module drives exactly that, on the
virtual-time loop, from one seed, and hands the observed history to the
checker. It never judges anything itself.

One run (:func:`run_seed`):

1. Start the cluster (:mod:`qjournal.sim.journalnodes`), format the journal.
2. Writer ``w1`` starts. Every writer is a new ``QuorumJournalManager``: it
   fences and recovers (``recover_unfinalized_segments``), reads the manifest to
   find the next txid, starts a segment, then writes batches of 1-5 txns (each
   ``sync`` is one acknowledgement), rolling the segment now and then
   (finalize + start). A writer stops at its first error; an expected error
   (fenced, no quorum, timeout) ends it quietly, anything else is a
   ``Failure``.
3. For ``steps`` steps the director waits a random virtual time and picks one
   action by weight (:class:`~qjournal.sim.faults.FaultConfig`): a fault, a
   writer takeover (optionally isolating the old writer, which keeps writing),
   a writer crash, a reader pass, or nothing.
4. The end: heal the network, switch network faults off, give disks their
   space back, restart every crashed node, stop every writer; a final writer
   recovers (retrying a bounded number of times), a final reader reads the
   whole log (``FinalLog``), and every node's segment files are recorded.

Invariants:

1. Every random choice comes from the loop's ``rng`` (replay from the seed).
2. A run with ``steps = k`` is a prefix of the run with ``steps = k + 1``
   up to the end phase (the minimiser relies on it).
3. Writers record ``Written`` before ``sync`` and ``Acked`` only after ``sync``
   returned; readers record ``Read`` only for records they returned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass, field

from qjournal.errors import InvariantViolation, QJournalError
from qjournal.journalnode.journal import SYNC_FAULT_POINTS
from qjournal.sim.journalnodes import CRASH_POINTS, CRASH_POINT_WEIGHTS, JID, NS_INFO, SimCluster
from qjournal.sim.faults import FaultConfig, choose
from qjournal.sim.history import (Acked, EpochGranted, Failure, FinalLog, Read, Setup, Written, WriterStarted)
from qjournal.sim.seeded_run import RunResult as _RunResult, SeededRun, disk_faults_of, execute, replay_command as \
    _replay_command

__all__ = ["SimOptions", "RunResult", "run_seed", "minimise", "replay_command"]

log = logging.getLogger(__name__)

#: at most this many writers alive at once (old ones keep running until fenced)
MAX_LIVE_WRITERS = 3
#: attempts of the final writer to recover once the world is healed
FINAL_RECOVERY_ATTEMPTS = 6
#: mean virtual time between director steps, and between a writer's batches
STEP_MEAN_S = 0.25
BATCH_MEAN_S = 0.05


@dataclass(frozen=True)
class SimOptions:
    """What defines a run (the replay key)."""

    seed: int
    steps: int = 150
    nodes: int = 3
    faults: FaultConfig = field(default_factory=FaultConfig)
    #: the JournalNodes' disks fail (FaultConfig's disk kinds); None: drawn by the seed (seeded_run.disk_faults_of)
    disk_faults: bool | None = None

    def replay_command(self) -> str:
        """The one-line command that replays this run."""
        return replay_command(self)


class RunResult(_RunResult):
    """The outcome of one journal run."""

    options: SimOptions

    def summary(self) -> str:
        h = self.history
        acks = h.of(Acked)
        faults = sum(v for k, v in self.stats.items() if k.startswith("fault:"))
        return (f"seed={self.options.seed} steps={self.options.steps} nodes={self.options.nodes} "
                f"writers={self.stats.get('writers', 0)} acked_txid={max((a.txid for a in acks), default=0)} "
                f"reads={len(h.of(Read))} faults={faults} virtual={self.virtual_s:.1f}s "
                f"violations={len(self.unexplained)}"
                + (f" known_bugs={self.known}" if self.known else ""))


def replay_command(opts: SimOptions) -> str:
    """The one-line command that replays ``opts``."""
    disk = None if opts.disk_faults is None else ("on" if opts.disk_faults else "off")
    return _replay_command("", [("seed", opts.seed), ("steps", opts.steps), ("nodes", opts.nodes),
                                ("disk-faults", disk)], opts.faults)


# -- the run ----------------------------------------------------------------------------------

class _Run(SeededRun):
    def __init__(self, opts: SimOptions) -> None:
        super().__init__(opts.seed, opts.faults if disk_faults_of(opts.seed, opts.disk_faults) else None)
        self.opts = opts
        self.cluster = SimCluster(self.rng, self.history, opts.nodes, opts.faults)
        self.writers: list[tuple[str, asyncio.Task, object]] = []  # (name, task, qjm holder)
        self.readers: list[asyncio.Task] = []
        self.n_writers = 0
        self.n_readers = 0
        self.stop_tailing = False
        self.last_reader_error = ""

    # -- writers ----------------------------------------------------------------------------
    def start_writer(self) -> str:
        self.n_writers += 1
        name = f"w{self.n_writers}"
        holder: dict = {}
        task = self.loop.create_task(self._writer(name, holder), name=name)
        self.writers.append((name, task, holder))
        self.stat("writers")
        return name

    async def _writer(self, name: str, holder: dict, final: bool = False) -> bool:
        """One writer incarnation; returns True when it recovered (and, unless final, wrote until stopped)."""
        qjm = self.cluster.new_qjm(name)
        holder["qjm"] = qjm
        h = self.history
        h.add(WriterStarted(name))
        rng = self.rng
        try:
            await qjm.recover_unfinalized_segments()
            h.add(EpochGranted(name, qjm.epoch))
            segs = await qjm.get_manifest(0, in_progress_ok=False)
            next_txid = max((s.end_txid for s in segs), default=0) + 1
            if final:
                return True
            while True:
                seg_start = next_txid
                stream = await qjm.start_log_segment(seg_start)
                if rng.random() < self.opts.faults.takeover_at_segment_start:
                    self._takeover_at_segment_start(name)
                n_batches = 1 + rng.randrange(12)
                for _ in range(n_batches):
                    await asyncio.sleep(rng.expovariate(1 / BATCH_MEAN_S))
                    k = 1 + rng.randrange(5)
                    for txid in range(next_txid, next_txid + k):
                        pad = rng.randbytes(rng.randrange(0, 200))
                        body = f"{name}/e{qjm.epoch}/t{txid}/".encode() + pad
                        h.add(Written(name, qjm.epoch, txid, body))
                        stream.write(txid, body)
                    stream.mark()
                    await stream.sync()
                    next_txid += k
                    h.add(Acked(name, qjm.epoch, next_txid - 1))
                    self.stat("acked_batches")
                await qjm.finalize_log_segment(seg_start, next_txid - 1)
                self.stat("segments_finalized")
        except asyncio.CancelledError:
            raise
        except InvariantViolation as e:
            h.add(Failure(name, type(e).__name__, str(e)))
        except QJournalError as e:
            self.stat(f"writer_stop:{type(e).__name__}")
        except Exception as e:  # noqa: BLE001 - anything else is a bug the checker must see
            h.add(Failure(name, type(e).__name__, repr(e)))
        return False

    def _takeover_at_segment_start(self, old: str) -> None:
        """Cut ``old`` from a majority right after it started a segment, and start a new writer
        (seed 000 §2.10.5 / §2.10.6: the old writer's first batch reaches a minority only)."""
        if len(self.live_writers()) >= MAX_LIVE_WRITERS:
            return
        names = self.cluster.names
        cut = self.rng.sample(names, len(names) // 2 + 1)
        for n in sorted(cut):
            self.cluster.network.partition(old, n)
        self.fault("takeover_at_segment_start", f"{old} from {sorted(cut)}")
        self.start_writer()

    def live_writers(self) -> list[tuple[str, asyncio.Task, dict]]:
        return [w for w in self.writers if not w[1].done()]

    async def _close_qjm(self, holder: dict) -> None:
        q = holder.get("qjm")
        if q is not None:
            try:
                await q.close()
            except Exception:  # noqa: BLE001 - closing a dead writer may fail any way
                pass

    async def kill_writer(self, w, detail: str, fault: bool = True) -> None:
        name, task, holder = w
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.cluster.network.crash(name)
        await self._close_qjm(holder)
        if fault:
            self.fault("writer_crash", detail or name)

    # -- readers ----------------------------------------------------------------------------
    async def _reader(self, name: str) -> list[tuple[int, bytes]] | None:
        qjm = self.cluster.new_qjm(name)
        out: list[tuple[int, bytes]] = []
        try:
            segs = await qjm.get_manifest(0, in_progress_ok=False)
            for seg in segs:
                stream = await qjm.open_segment(seg)
                try:
                    while True:
                        rec = await stream.read_next()
                        if rec is None:
                            break
                        self.history.add(Read(name, rec.txid, rec.body))
                        out.append((rec.txid, rec.body))
                finally:
                    await stream.close()
            return out
        except asyncio.CancelledError:
            raise
        except InvariantViolation as e:
            self.history.add(Failure(name, type(e).__name__, str(e)))
        except QJournalError as e:
            self.stat(f"reader_stop:{type(e).__name__}")
            self.last_reader_error = f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001
            self.history.add(Failure(name, type(e).__name__, repr(e)))
            self.last_reader_error = f"{type(e).__name__}: {e}"
        finally:
            await qjm.close()
        return None

    async def _tailer(self, name: str) -> None:
        """A reader that follows the log for the whole run, in-progress segment included
        (the standby's path: edit caches over RPC, streaming on a miss); every record it is
        handed is a ``Read`` that the checker holds against the final log (rules 2, 3)."""
        qjm = self.cluster.new_qjm(name)
        next_txid = 1
        try:
            while not self.stop_tailing:
                try:
                    stream = await qjm.open_input(next_txid, None, True)
                    try:
                        while (rec := await stream.read_next()) is not None:
                            if rec.txid != next_txid:
                                self.history.add(Failure(name, "TailGap", f"expected txid {next_txid}, "
                                                         f"read {rec.txid}"))
                                return
                            self.history.add(Read(name, rec.txid, rec.body))
                            next_txid += 1
                    finally:
                        await stream.close()
                except InvariantViolation as e:
                    self.history.add(Failure(name, type(e).__name__, str(e)))
                    return
                except QJournalError as e:
                    self.stat(f"tailer_error:{type(e).__name__}")
                await asyncio.sleep(self.rng.uniform(0.01, 1.0))
        finally:
            self.stat("tailer_txns", next_txid - 1)
            self.stat("tailer_rpc_reads", qjm.rpc_reads)
            self.stat("tailer_rpc_fallbacks", qjm.rpc_fallbacks)
            await qjm.close()

    def start_reader(self) -> None:
        self.n_readers += 1
        self.readers.append(self.loop.create_task(self._reader(f"r{self.n_readers}")))
        self.stat("readers")

    # -- the director -----------------------------------------------------------------------
    async def step(self) -> None:
        rng = self.rng
        cl = self.cluster
        action = choose(rng, self.opts.faults.director_weights())
        names = cl.names
        self.inject_disk_faults({n: cl.nodes[n].fs for n in names})
        if action == "write":
            return
        if action == "partition":
            parties = names + [w[0] for w in self.live_writers()]
            a, b = rng.sample(parties, 2)
            cl.network.partition(a, b)
            self.fault("partition", f"{a} | {b}")
        elif action == "heal":
            cl.network.heal()
            self.fault("heal")
        elif action == "jn_crash":
            node = cl.nodes[rng.choice(names)]
            if node.alive:
                node.crash_now("director")
                self.fault("jn_crash", node.name)
        elif action == "jn_crash_point":
            node = cl.nodes[rng.choice(names)]
            if node.alive:
                point = rng.choices(CRASH_POINTS, CRASH_POINT_WEIGHTS)[0]
                after = rng.randrange(3)
                node.arm(point, after)
                self.fault("jn_crash_point", f"{node.name} {point} after {after}")
        elif action == "jn_restart":
            dead = [n for n in names if not cl.nodes[n].alive]
            if dead:
                n = rng.choice(dead)
                await cl.nodes[n].start()
                self.fault("jn_restart", n)
        elif action == "disk_full":
            node = cl.nodes[rng.choice(names)]
            node.fs.capacity_bytes = node.fs.used_bytes() + rng.randrange(0, 3000)
            self.fault("disk_full", f"{node.name} capacity {node.fs.capacity_bytes}")
        elif action == "disk_free":
            full = [n for n in names if cl.nodes[n].fs.capacity_bytes is not None]
            if full:
                n = rng.choice(full)
                cl.nodes[n].fs.capacity_bytes = None
                self.fault("disk_free", n)
        elif action == "writer_takeover":
            live = self.live_writers()
            if len(live) >= MAX_LIVE_WRITERS:
                await self.kill_writer(live[0], f"{live[0][0]} (too many live writers)")
                live = live[1:]
            if live and rng.random() < self.opts.faults.isolate_old_writer:
                old = live[-1][0]
                cut = rng.sample(names, len(names) // 2 + 1)
                for n in sorted(cut):
                    cl.network.partition(old, n)
                self.fault("isolate_old_writer", f"{old} from {sorted(cut)}")
            new = self.start_writer()
            self.fault("writer_takeover", new)
        elif action == "writer_crash":
            live = self.live_writers()
            if live:
                await self.kill_writer(live[-1], live[-1][0])
        elif action == "read":
            self.start_reader()
            self.fault("read")
        elif action == "jn_sync":
            node = cl.nodes[rng.choice(names)]
            if node.alive:
                cl.background.append(asyncio.get_running_loop().create_task(node.sync_once()))
                self.fault("jn_sync", node.name)

    # -- the whole run -----------------------------------------------------------------------
    async def main(self) -> None:
        cl = self.cluster
        await cl.start()
        self.history.add(Setup(tuple(cl.names)))
        cl.net_faults.enabled = False  # set-up is not under test
        fmt = cl.new_qjm("formatter")
        await fmt.format(NS_INFO)
        await fmt.close()
        cl.net_faults.enabled = True
        self.start_writer()
        self.readers.append(self.loop.create_task(self._tailer("tailer")))
        for _ in range(self.opts.steps):
            await asyncio.sleep(self.rng.expovariate(1 / STEP_MEAN_S))
            await self.step()
            if not self.live_writers() and self.rng.random() < 0.5:
                self.start_writer()
        await self.finish()

    async def finish(self) -> None:
        cl = self.cluster
        for w in self.live_writers():
            await self.kill_writer(w, f"{w[0]} (end of run)", fault=False)
        for _, _, holder in self.writers:
            await self._close_qjm(holder)
        self.stop_tailing = True
        await asyncio.gather(*self.readers, return_exceptions=True)
        cl.network.heal()
        cl.net_faults.enabled = False
        for n in cl.names:
            node = cl.nodes[n]
            node.fs.capacity_bytes = None
            node.fs.armed.clear()
            node.fs.failures.clear()
            node.armed_point = None
            if not node.alive:
                await node.start()
        # let leftovers of the faulty phase (delayed frames, timeouts) drain
        await asyncio.sleep(30.0)
        for attempt in range(FINAL_RECOVERY_ATTEMPTS):
            holder: dict = {}
            ok = await self._writer(f"final{attempt}", holder, final=True)
            await self._close_qjm(holder)
            if ok:
                break
            await asyncio.sleep(5.0)
        else:
            self.history.add(Failure("final writer", "NoRecovery",
                                     f"no recovery in {FINAL_RECOVERY_ATTEMPTS} attempts on a healed "
                                     f"cluster (liveness)"))
        records = await self._reader("final-reader")
        if records is None:
            # no outcome to judge the log rules against: report the failed read alone
            self.history.add(Failure("final reader", "NoRead", f"the final read of the whole log "
                                     f"failed: {self.last_reader_error}"))
        else:
            first = records[0][0] if records else 1
            bodies = []
            for i, (txid, body) in enumerate(records):
                if txid != first + i:
                    self.history.add(Failure("final reader", "Gap", f"expected txid {first + i}, "
                                             f"got {txid}"))
                    break
                bodies.append(body)
            self.history.add(FinalLog(first, tuple(bodies)))
        await self._check_redundancy_heals()
        for ev in cl.disk_states():
            self.history.add(ev)
        for n in cl.names:
            for k, v in sorted(cl.nodes[n].stats.items()):
                self.stat(k, v)
            for k, v in sorted(cl.nodes[n].fs.stats.items()):
                if k.startswith(("crash_", "failed:", "fsync_eio_")) or k == "enospc":
                    self.stat(f"disk:{k}", v)
        for k, v in cl.net_faults.counts.items():
            self.stat(f"fault:{k}", v)
        self.stat("http_fetches", cl.http_fetches)
        self.stat("runs_tcp_fifo" if cl.fifo else "runs_unordered_network")
        await cl.stop()


    async def _check_redundancy_heals(self) -> None:
        """Issue 12, judged from the nodes' manifests (an oracle apart from ``sync_rules``): after two
        syncer rounds on every node of the healed cluster, every finalized segment that is known
        committed is on every node, with the same end and digest, except on a node that holds that
        segment in progress as its newest (recovery decides it there)."""
        cl = self.cluster
        for _ in range(2):
            for n in cl.names:
                await cl.nodes[n].sync_once()
        try:
            ms = {n: (await cl.nodes[n].journal(JID)).get_edit_log_manifest(0, True, True) for n in cl.names}
        except QJournalError as e:
            self.history.add(Failure("syncer", "NotHealed", f"cannot read the manifests: {e}"))
            return
        committed = max(m.committed_txid for m in ms.values())
        copies: dict[int, dict[str, object]] = {}
        for n, m in ms.items():
            for sg in m.segments:
                if not sg.in_progress:
                    copies.setdefault(sg.start_txid, {})[n] = sg
        for start, held in sorted(copies.items()):
            kinds = {(sg.end_txid, sg.digest) for sg in held.values()}
            if len(kinds) > 1:
                self.history.add(Failure("syncer", "SyncConflict", f"finalized copies of segment {start} "
                                         f"differ: {sorted((k, str(v)) for k, v in held.items())}"))
            seg = next(iter(held.values()))
            if seg.end_txid > committed:
                continue
            for n, m in ms.items():
                if n in held:
                    continue
                newest = max((sg.start_txid for sg in m.segments), default=None)
                if any(sg.in_progress and sg.start_txid == start for sg in m.segments) and start == newest:
                    continue
                if seg.end_txid < (await cl.nodes[n].journal(JID)).purged_below:
                    continue
                self.history.add(Failure(n, "NotHealed", f"after two sync rounds it still lacks finalized "
                                         f"segment {seg} held by {', '.join(sorted(held))}"))


def run_seed(opts: SimOptions) -> RunResult:
    """Run one seed and check its history.

    Args:
        opts: the replay key.

    Returns:
        The result; ``violations`` is empty when every rule held. A stalled or
        runaway simulation is reported as a ``failure`` violation.
    """
    return _execute(opts, lambda: _Run(opts))


def run_crash_point_scenario(point: str, node: int, seed: int = 0) -> RunResult:
    """A scripted run that forces a recovery with downloads, with ``point`` armed on one node.

    The script (network faults off; after reference §6.4, TestQJMWithFaults):
    writer ``w1`` writes txids 1-3 and finalizes them, starts segment 4, syncs
    4-5 on every node, then is cut from ``jn1`` and ``jn2`` and writes txid 6
    (it reaches ``jn0`` only; the sync times out) and dies. The crash point is
    armed on node ``node``; writer ``w2`` fences and recovers segment 4 (txid 6
    on ``jn0`` is the longest log, so the others download it: accept-recovery,
    paxos persist, rename), writes 7-8 and finalizes. Crashed nodes restart,
    then the usual end phase (final recovery, final read, disks) runs.

    Args:
        point: one of :data:`qjournal.sim.journalnodes.CRASH_POINTS`.
        node: index of the JournalNode to arm (0-2).
        seed: seed of the disk's crash outcomes and latencies.

    Returns:
        The checked result (``options.steps`` is 0).
    """
    opts = SimOptions(seed=seed, steps=0, nodes=3, faults=FaultConfig.parse("none"))
    return _execute(opts, lambda: _CrashPointRun(opts, point, node))


def run_section_2_10_6_scenario(seed: int = 0) -> RunResult:
    """The scenario of seed 000 §2.10.6, scripted: why recovery compares writer epochs first.

    ``w1`` (epoch 1) finalizes txids 1-3, starts segment 4 everywhere, is cut
    from ``jn1`` and ``jn2`` and writes 4-6, which reach ``jn0`` only. ``w2``
    cannot reach ``jn0``: its new-epoch quorum sees segment 4 empty (absent), so
    it starts segment 4 again, has txid 4 acknowledged by ``jn1`` and ``jn2``,
    and dies. ``w3`` recovers with ``jn0`` and ``jn1`` answering: ``jn0`` has the
    longer copy 4-6 (last writer epoch 1), ``jn1`` the copy 4-4 (epoch 2). The
    real rule picks ``jn1``; a longest-log rule would pick ``jn0`` and lose the
    acknowledged txid 4.

    Returns:
        The checked result.
    """
    opts = SimOptions(seed=seed, steps=0, nodes=3, faults=FaultConfig.parse("none"))
    return _execute(opts, lambda: _Section2106Run(opts))


def _execute(opts: SimOptions, make_run) -> RunResult:
    history, stats, violations, unexplained, known, virtual = execute(
        opts.seed, make_run, max_virtual_time_s=max(3600.0, opts.steps * 20.0))
    return RunResult(opts, history, violations, stats, virtual, unexplained, known)


class _CrashPointRun(_Run):
    """The script of :func:`run_crash_point_scenario`."""

    def __init__(self, opts: SimOptions, point: str, node: int) -> None:
        super().__init__(opts)
        self.point = point
        self.node = node

    async def _write(self, name, qjm, stream, txids, wait_s=None) -> bool:
        for t in txids:
            body = f"{name}/e{qjm.epoch}/t{t}".encode()
            self.history.add(Written(name, qjm.epoch, t, body))
            stream.write(t, body)
        stream.mark()
        try:
            await stream.sync()
        except QJournalError:
            return False
        self.history.add(Acked(name, qjm.epoch, txids[-1]))
        return True

    async def main(self) -> None:
        cl = self.cluster
        h = self.history
        await cl.start()
        h.add(Setup(tuple(cl.names)))
        cl.net_faults.enabled = False
        fmt = cl.new_qjm("formatter")
        await fmt.format(NS_INFO)
        await fmt.close()
        # w1: a finalized segment, then an in-progress one whose last txid reaches jn0 only
        w1 = cl.new_qjm("w1")
        h.add(WriterStarted("w1"))
        await w1.recover_unfinalized_segments()
        h.add(EpochGranted("w1", w1.epoch))
        victim = cl.names[self.node]
        sync_point = self.point.startswith("journal:") and self.point[len("journal:"):] in SYNC_FAULT_POINTS
        if sync_point:  # the victim misses segment 1-3, for its syncer to copy through the crash point
            cl.network.partition("w1", victim)
        s = await w1.start_log_segment(1)
        assert await self._write("w1", w1, s, [1, 2, 3])
        await w1.finalize_log_segment(1, 3)
        cl.network.heal()
        s = await w1.start_log_segment(4)
        assert await self._write("w1", w1, s, [4, 5])
        cl.network.partition("w1", cl.names[1])
        cl.network.partition("w1", cl.names[2])
        await self._write("w1", w1, s, [6])
        cl.network.crash("w1")
        await w1.close()
        cl.network.heal()
        # the crash point, then the takeover that must recover through it
        cl.nodes[victim].arm(self.point, 0)
        self.fault("jn_crash_point", f"{victim} {self.point} after 0")
        if sync_point:
            await cl.nodes[victim].sync_once()
        holder: dict = {}
        w2 = cl.new_qjm("w2")
        holder["qjm"] = w2
        h.add(WriterStarted("w2"))
        try:
            await w2.recover_unfinalized_segments()
            h.add(EpochGranted("w2", w2.epoch))
            segs = await w2.get_manifest(0, in_progress_ok=False)
            nxt = max((x.end_txid for x in segs), default=0) + 1
            s = await w2.start_log_segment(nxt)
            if await self._write("w2", w2, s, [nxt, nxt + 1]):
                await w2.finalize_log_segment(nxt, nxt + 1)
        except InvariantViolation as e:
            h.add(Failure("w2", type(e).__name__, str(e)))
        except QJournalError as e:
            self.stat(f"writer_stop:{type(e).__name__}")
        await self._close_qjm(holder)
        fired = not cl.nodes[cl.names[self.node]].alive
        self.stat("crash_point_fired" if fired else "crash_point_not_reached")
        await self.finish()


def minimise(opts: SimOptions, result: RunResult, budget: int = 40) -> RunResult:
    """Find a smaller failing run: fewer steps first, then fewer fault kinds.

    Args:
        opts: the failing run's options.
        result: its result (must have violations).
        budget: at most this many extra runs.

    Returns:
        The smallest failing run found (``result`` itself if nothing smaller fails).
    """
    best = result
    runs = 0
    target = result.unexplained or result.violations
    rules = {v.rule for v in target}

    def fails(o: SimOptions) -> RunResult | None:
        nonlocal runs
        runs += 1
        r = run_seed(o)
        found = r.unexplained if result.unexplained else r.violations
        return r if found and ({v.rule for v in found} & rules) else None

    # steps: halve while it still fails, then step down
    lo_fail = opts.steps
    cand = opts.steps // 2
    while cand >= 1 and runs < budget:
        r = fails(dataclasses.replace(best.options, steps=cand))
        if r is None:
            break
        best, lo_fail = r, cand
        cand //= 2
    step = max(1, lo_fail // 8)
    cand = lo_fail - step
    while cand >= 1 and runs < budget:
        r = fails(dataclasses.replace(best.options, steps=cand))
        if r is None:
            break
        best = r
        cand -= step
    # fault kinds: switch each off if the run still fails without it
    for kind in best.options.faults.KINDS:
        if runs >= budget:
            break
        if getattr(best.options.faults, kind) == 0:
            continue
        r = fails(dataclasses.replace(best.options, faults=best.options.faults.without(kind)))
        if r is not None:
            best = r
    return best


class _Section2106Run(_CrashPointRun):
    """The script of :func:`run_section_2_10_6_scenario`."""

    def __init__(self, opts: SimOptions) -> None:
        super().__init__(opts, "", 0)

    async def _writer_start(self, name: str):
        q = self.cluster.new_qjm(name)
        self.history.add(WriterStarted(name))
        await q.recover_unfinalized_segments()
        self.history.add(EpochGranted(name, q.epoch))
        return q

    async def main(self) -> None:
        cl = self.cluster
        jn0, jn1, jn2 = cl.names
        await cl.start()
        self.history.add(Setup(tuple(cl.names)))
        cl.net_faults.enabled = False
        fmt = cl.new_qjm("formatter")
        await fmt.format(NS_INFO)
        await fmt.close()
        w1 = await self._writer_start("w1")
        s = await w1.start_log_segment(1)
        await self._write("w1", w1, s, [1, 2, 3])
        await w1.finalize_log_segment(1, 3)
        s = await w1.start_log_segment(4)
        cl.network.partition("w1", jn1)
        cl.network.partition("w1", jn2)
        await self._write("w1", w1, s, [4, 5, 6])  # reaches jn0 only; the sync fails
        cl.network.crash("w1")
        await w1.close()
        cl.network.heal()
        cl.network.partition("w2", jn0)
        holder: dict = {}
        try:
            w2 = await self._writer_start("w2")
            holder["qjm"] = w2
            segs = await w2.get_manifest(0, in_progress_ok=False)
            nxt = max((x.end_txid for x in segs), default=0) + 1
            s = await w2.start_log_segment(nxt)
            await self._write("w2", w2, s, [nxt])
        except QJournalError as e:
            self.stat(f"writer_stop:{type(e).__name__}")
        cl.network.crash("w2")
        await self._close_qjm(holder)
        cl.network.heal()
        cl.network.partition("w3", jn2)
        holder = {}
        try:
            w3 = await self._writer_start("w3")
            holder["qjm"] = w3
        except InvariantViolation as e:
            self.history.add(Failure("w3", type(e).__name__, str(e)))
        except QJournalError as e:
            self.stat(f"writer_stop:{type(e).__name__}")
        await self._close_qjm(holder)
        cl.network.heal()
        await self.finish()

"""A simulated JournalNode cluster on one virtual-time loop: the real JournalNode, a simulated world.

Why: to run the *real* JournalNode (its request handling,
:class:`qjournal.journalnode.service.JournalNodeService`, and its rules,
:class:`qjournal.journalnode.journal.Journal`) and the *real* quorum client
(:class:`qjournal.client.qjm.QuorumJournalManager`) against seeded network and
disk faults, deterministically, many thousand times.

What is real and what is simulated:

* Real: the JournalNode's service, the very object the daemon serves (argument
  checks and decoding by the QJournalProtocol table, epoch-checked dispatch, the
  order of calls, the inline-write decision, accept-recovery's streamed download,
  digests, the syncer's journal side, ``/getJournal``'s checks and chunks) and
  ``Journal`` under it (every fencing, contiguity, recovery and crash-repair rule),
  the RPC layer (:mod:`qjournal.transport`: framing, ordering, timeouts, typed
  errors) over the in-memory network, the whole client (``QuorumJournalManager``,
  ``AsyncLoggerSet``, ``AsyncLogger``, ``QuorumOutputStream``, the reader with
  replica failover), the JournalNodeSyncer.
* Simulated, behind the service's host (:class:`_SimHost`, one per incarnation of
  a node): the disk (:class:`~qjournal.sim.disk.SimJournalStorage` on
  :class:`~qjournal.sim.disk.SimFS`), each journal's worker thread (a
  :class:`~qjournal.sim.loop.SimThread`: its calls run one at a time, a loop turn
  away, as on the daemon's thread), the clock (:class:`~qjournal.sim.loop.VirtualTimeLoop`),
  the network's faults (:class:`~qjournal.sim.faults.NetworkFaults`) and HTTP: a
  simulated ``GET /getJournal`` (:meth:`SimCluster.http_fetch`) obeys partitions,
  crashes and the network's drop/delay, and hands over a whole body (the only
  place that holds one) that the downloads then consume in chunks of
  ``transfer_chunk_bytes`` (small here, so records straddle chunks).

Observation for the checker (server side, exact): the service tells its host a
``Promised`` when ``new_epoch`` returned, an ``Accepted`` when ``journal`` did, a
``Finalized`` when ``finalize_log_segment`` did, each in the same step as the
``Journal`` call (before any other code runs), i.e. when the node's state changed,
whether or not the reply reaches the writer; the host records them as the history's
``Promise``, ``Accepted`` and ``Finalized``.

Invariants:

1. A crashed node runs no more code against its disk: every Journal call passes
   the host's guard, which refuses a stale incarnation's call (a handler or a
   queued thread call of a previous incarnation raises instead of touching the
   restarted node's state).
2. A crash loses exactly what :class:`SimFS` says is not durable.
3. Everything is ordered by the loop and drawn from the loop's ``rng``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from qjournal.client.qjm import QuorumJournalManager
from qjournal.client.settings import QJMSettings
from qjournal.errors import InvariantViolation, QJournalError, TransportError
from qjournal.journalnode.journal import FAULT_POINTS, SYNC_FAULT_POINTS, Journal
from qjournal.journalnode.service import (Accepted as Appended, Finalized as SegmentFinalized, JournalEvent,
                                          JournalNodeService, JournalNodeSettings, Promised, RecoveryPlanned)
from qjournal.journalnode.syncer import JournalSyncer, SyncerSettings
from qjournal.protocol.journal_layout import current_dir, journal_dir
from qjournal.protocol.messages import NamespaceInfo, SegmentState
from qjournal.protocol.segment import iter_records, parse_segment_file_name, segment_file_name
from qjournal.sim.disk import SimFS, SimJournalStorage, SimulatedCrash
from qjournal.sim.faults import FaultConfig, NetworkFaults
from qjournal.sim.history import Accepted, Failure, Finalized, History, NodeSegment, Note, Promise
from qjournal.sim.loop import SimThread
from qjournal.transport import MemoryNetwork, RpcServer, memory_connector
from qjournal.transport.download import SegmentDownload, memory_download

__all__ = ["SimCluster", "SimJournalNode", "JID", "NS_INFO", "STORAGE_POINTS", "sim_settings"]

log = logging.getLogger(__name__)

JID = "simjournal"
#: the open segment grows this much at a time (the disk's preallocation, small here so that a run's
#: segments cross several steps and crashes meet zero tails)
PREALLOCATE_BYTES = 512
NS_INFO = NamespaceInfo(4242, "simcluster")
#: SimFS crash points a fault may arm (beyond the Journal's own FAULT_POINTS)
STORAGE_POINTS = ["write", "before_fsync", "after_fsync", "rename", "before_fsync_dir"]
#: every crash point, in a fixed order
CRASH_POINTS = STORAGE_POINTS + [f"journal:{p}" for p in FAULT_POINTS + SYNC_FAULT_POINTS]
#: relative weight of each crash point when one is armed: the window between a batch's
#: append and its fsync (a torn last record) weighs more, it is where most repair logic is
CRASH_POINT_WEIGHTS = [4 if p in ("journal:after_append", "before_fsync") else 1 for p in CRASH_POINTS]


#: edit cache capacities a run draws from (get_journaled_edits, HDFS-13150): disabled, tiny
#: (evicts within a segment, so tailers miss and stream), small, and the production default
EDIT_CACHE_CHOICES = (0, 2048, 64 * 1024, 32 * 1024 * 1024)
#: bytes in one get_journaled_edits answer beyond its first batch (the daemon: half an RPC frame)
EDIT_CACHE_MAX_ANSWER_BYTES = 4096


def sim_settings() -> QJMSettings:
    """Client timeouts scaled for the simulation (virtual seconds cost nothing, but a
    run should see several timeouts per writer, not one)."""
    return QJMSettings().with_overrides(
        start_segment_timeout_ms=5000, prepare_recovery_timeout_ms=10000,
        accept_recovery_timeout_ms=10000, finalize_segment_timeout_ms=10000,
        select_input_streams_timeout_ms=5000, get_journal_state_timeout_ms=5000,
        new_epoch_timeout_ms=10000, write_txns_timeout_ms=5000, operations_timeout_ms=10000,
        http_open_timeout_ms=5000, http_read_timeout_ms=5000, connect_timeout_ms=2000,
        out_of_sync_heartbeat_interval_ms=1000, transfer_chunk_bytes=512)


def jn_settings(edit_cache_bytes: int, transfer_chunk_bytes: int) -> JournalNodeSettings:
    """The JournalNodes' limits in a simulation: the daemon's defaults, with the run's edit cache and
    the simulation's small transfer chunks and edit answers."""
    return JournalNodeSettings(edit_cache_bytes=edit_cache_bytes, transfer_chunk_bytes=transfer_chunk_bytes,
                               edits_answer_max_bytes=EDIT_CACHE_MAX_ANSWER_BYTES)


class _NodeDown(TransportError):
    """The node crashed while handling this call (the reply is never delivered)."""


class _SimHost:
    """The service's host in the simulation, for one incarnation of a node (module docstring)."""

    def __init__(self, node: "SimJournalNode", incarnation: int) -> None:
        self._node = node
        self._incarnation = incarnation
        self.name = node.name
        self.http_port = 80
        self.http_url = f"http://{node.name}"
        loop = asyncio.get_running_loop()
        self.wall_clock: Callable[[], float] = loop.time
        self.monotonic: Callable[[], float] = loop.time
        self.fault_hook = node._fault_point

    def open_storage(self, jid: str) -> SimJournalStorage:
        node = self._node
        return SimJournalStorage(node.fs, journal_dir(f"/{node.name}", jid),
                                 on_crash=lambda: node.crash_now("storage crash point"),
                                 on_note=lambda kind, detail: node.cluster.history.add(Note(kind, node.name, detail)),
                                 preallocate_bytes=PREALLOCATE_BYTES)

    def has_journal(self, jid: str) -> bool:
        return self._node.fs.exists(journal_dir(f"/{self._node.name}", jid))

    def journal_thread(self, jid: str) -> SimThread:
        return SimThread()

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def guard(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Invariant 1, and what a crash or a broken rule looks like to the checker."""
        node = self._node
        if not node.alive or node.incarnation != self._incarnation:
            raise _NodeDown(f"{node.name} is down ({what})")
        try:
            return fn(*args)
        except SimulatedCrash as e:
            raise _NodeDown(f"{node.name} crashed in {what} at {e.point}") from None
        except InvariantViolation as e:
            node.cluster.history.add(Failure(node.name, type(e).__name__, f"{what}: {e}"))
            raise
        except QJournalError:
            raise
        except OSError:  # the service makes it a JournalError naming the journal, as in the daemon
            key = f"jn_storage_error:{what}"
            node.stats[key] = node.stats.get(key, 0) + 1
            raise
        except Exception as e:
            node.cluster.history.add(Failure(node.name, type(e).__name__, f"{what}: {e}"))
            raise

    async def open_download(self, url: str, chunk_bytes: int) -> SegmentDownload:
        node = self._node
        src, jid, seg_txid, in_progress_ok, storage_info = _parse_get_journal_url(url)
        body, crc = await node.cluster.http_fetch(node.name, src, jid, seg_txid, in_progress_ok, storage_info)
        return memory_download(body, crc, chunk_bytes)

    def observe(self, event: JournalEvent) -> None:
        node = self._node
        history = node.cluster.history
        if isinstance(event, Promised):
            history.add(Promise(node.name, event.epoch, event.peer))
        elif isinstance(event, Appended):
            history.add(Accepted(node.name, event.epoch, event.first_txid, event.last_txid))
        elif isinstance(event, SegmentFinalized):
            history.add(Finalized(node.name, event.epoch, event.start_txid, event.end_txid))
        elif isinstance(event, RecoveryPlanned) and not event.plan.download:
            node._note_kept_copy(event.jid, event.plan.segment_state, event.from_url)
            node._note_unsynced_copy(event.jid, event.plan.segment_state)


class SimJournalNode:
    """One JournalNode process: the real :class:`JournalNodeService` on a SimFS, served over the memory
    network; restarted as a new incarnation (a new service reading its disk lazily).

    Args:
        cluster: the owning cluster.
        name: the node's network name (``host:port``, as written in the URI).
    """

    def __init__(self, cluster: "SimCluster", name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.fs = SimFS(cluster.rng, name=name)
        self.alive = False
        self.incarnation = 0
        #: the request handling of the current incarnation (the daemon's own class)
        self.service: JournalNodeService | None = None
        self.server: RpcServer | None = None
        self.armed_point: tuple[str, int] | None = None  # Journal fault point, countdown
        self.stats: dict[str, int] = {}
        self._syncer: JournalSyncer | None = None  # of the current incarnation

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start (or restart) the node: a new incarnation that rereads its disk lazily."""
        assert not self.alive, f"{self.name} is already running"
        self.incarnation += 1
        self._syncer = None
        self.service = JournalNodeService(_SimHost(self, self.incarnation), self.cluster.jn_settings)
        self.server = RpcServer(self.service, name=self.name)
        await self.server.start_memory(self.cluster.network, self.name)
        self.alive = True

    def crash_now(self, why: str) -> None:
        """Power-cut: connections reset, unsynced bytes lost or torn, process state gone."""
        if not self.alive:
            return
        self.alive = False
        self.cluster.network.crash(self.name)
        applied = self.fs.crash()
        for mode in applied.values():
            self.stats[f"torn:{mode}"] = self.stats.get(f"torn:{mode}", 0) + 1
        self.service = None
        self.armed_point = None
        server, self.server = self.server, None
        if server is not None:
            t = asyncio.get_running_loop().create_task(server.stop())
            self.cluster.background.append(t)
        log.debug("sim: %s crashed (%s)", self.name, why)

    def arm(self, point: str, after: int) -> None:
        """Crash inside the ``after``-th next pass through ``point`` (see ``CRASH_POINTS``)."""
        if point.startswith("journal:"):
            self.armed_point = (point[len("journal:"):], after)
        else:
            self.fs.arm(point, after)

    def _fault_point(self, name: str) -> None:
        ap = self.armed_point
        if ap is None or ap[0] != name:
            return
        if ap[1] > 0:
            self.armed_point = (name, ap[1] - 1)
            return
        self.armed_point = None
        self.stats[f"disk:crash_at_journal:{name}"] = self.stats.get(f"disk:crash_at_journal:{name}", 0) + 1
        self.crash_now(f"journal point {name}")
        raise SimulatedCrash(name)

    def _live_service(self, what: str) -> JournalNodeService:
        service = self.service
        if not self.alive or service is None:
            raise _NodeDown(f"{self.name} is down ({what})")
        return service

    async def journal(self, jid: str) -> Journal:
        """The ``Journal`` of ``jid`` in this incarnation (opened through the service), for the
        workload's oracle checks.

        Raises:
            _NodeDown: the node is down.
        """
        return (await self._live_service("oracle").journal_slot(jid)).journal

    # -- observation (oracles: read the disks directly, no effect on the run) ---------------
    def _segment_bytes(self, jid: str, start_txid: int) -> bytes | None:
        """The bytes of this node's segment file starting at ``start_txid`` (in progress first)."""
        found = None
        for name, data in self.segment_files(jid):
            p = parse_segment_file_name(name)
            if p is not None and p.start_txid == start_txid and (found is None or p.end_txid is None):
                found = data
        return found

    def _note_kept_copy(self, jid: str, state: SegmentState, from_url: str) -> None:
        """Observation for known-bug attribution (KB3): accept_recovery kept this node's copy
        because it has the chosen length; record whether its records differ from the source's."""
        try:
            src = _parse_get_journal_url(from_url)[0]
        except TransportError:
            return
        other = self.cluster.nodes.get(src)
        if other is None or other is self or not other.alive:
            return
        mine, theirs = self._segment_bytes(jid, state.start_txid), other._segment_bytes(jid, state.start_txid)
        if mine is None or theirs is None:
            return
        if _records_upto(mine, state.end_txid) != _records_upto(theirs, state.end_txid):
            self.cluster.history.add(Note("accept_kept_different", self.name,
                                          f"segment {state.start_txid} {state.end_txid} from {src}"))

    def _note_unsynced_copy(self, jid: str, state: SegmentState) -> None:
        """Observation for KB1: the kept copy (no download) still has unsynced bytes when the
        paxos decision is about to be persisted over it."""
        path = f"{current_dir(f'/{self.name}', jid)}/{segment_file_name(state.start_txid)}"
        try:
            ino = self.fs._ino(path)
        except FileNotFoundError:
            return
        if bytes(ino.visible) != ino.durable:
            self.cluster.history.add(Note("accept_unsynced", self.name,
                                          f"segment {state.start_txid}"))

    # -- the JournalNodeSyncer ---------------------------------------------------------------
    def syncer(self) -> JournalSyncer:
        """This incarnation's syncer (the real one, wired by the service): peers over the memory
        network, downloads through the simulated HTTP."""
        if self._syncer is None:
            s = self.cluster.settings
            peers = [tuple(n.rsplit(":", 1)) for n in self.cluster.names if n != self.name]
            self._syncer = self._live_service("syncer").new_syncer(
                JID, [(h, int(p)) for h, p in peers],
                memory_connector(self.cluster.network, self.name, connect_timeout_ms=s.connect_timeout_ms),
                SyncerSettings(interval_s=0.0, rpc_timeout_ms=s.select_input_streams_timeout_ms),
                clock=asyncio.get_running_loop().time)
        return self._syncer

    async def sync_once(self) -> None:
        """One syncer round (a failed round is counted in its stats, never raised)."""
        if not self.alive:
            return
        syncer = self.syncer()
        before = syncer.stats.segments_synced
        await syncer.sync_once()
        copied = syncer.stats.segments_synced - before
        if copied:
            self.stats["sync:segments_copied"] = self.stats.get("sync:segments_copied", 0) + copied
        for text in syncer.stats.conflicts:
            self.cluster.history.add(Failure(self.name, "SyncConflict", text))

    # -- /getJournal -----------------------------------------------------------------------
    async def serve_segment(self, jid: str, segment_txid: int, in_progress_ok: bool,
                            storage_info: str | None = None) -> tuple[bytes, int | None]:
        """What ``GET /getJournal`` answers (the service's work): the segment bytes and their CRC32C.

        Raises:
            _NodeDown, SegmentNotFoundError, JournalNotFormattedError, NamespaceMismatchError
        """
        _name, download = await self._live_service("getJournal").serve_segment(jid, segment_txid, in_progress_ok,
                                                                               storage_info)
        async with download:
            body = b"".join([chunk async for chunk in download])
        return body, download.crc

    def segment_files(self, jid: str) -> list[tuple[str, bytes]]:
        """``(file name, bytes)`` of every segment file of ``jid`` on this node's disk, sorted."""
        root = current_dir(f"/{self.name}", jid)
        out = []
        for path, data in self.fs.walk_files(root):
            name = path.rsplit("/", 1)[1]
            if path.rsplit("/", 1)[0] == root and parse_segment_file_name(name) is not None:
                out.append((name, data))
        return out


def _records_upto(data: bytes, end_txid: int) -> list[tuple[int, bytes]]:
    out = []
    try:
        for rec in iter_records(data):
            if rec.txid > end_txid:
                break
            out.append((rec.txid, rec.body))
    except QJournalError:
        pass
    return out


def _parse_get_journal_url(url: str) -> tuple[str, str, int, bool, str | None]:
    """``(node, jid, segment txid, in progress ok, storageInfo)`` of a ``/getJournal`` URL."""
    u = urlsplit(url)
    q = parse_qs(u.query)
    try:
        return (u.netloc, q["jid"][0], int(q["segmentTxId"][0]), q.get("inProgressOk", ["true"])[0] != "false",
                q["storageInfo"][0] if "storageInfo" in q else None)
    except (KeyError, ValueError, IndexError):
        raise TransportError(f"bad getJournal URL {url!r}") from None


class SimCluster:
    """JournalNodes, the network and the history of one simulated run.

    Args:
        rng: the loop's random generator.
        history: where observations go.
        n_nodes: 3 or 5.
        faults: the fault configuration (network part used here).
    """

    def __init__(self, rng, history: History, n_nodes: int, faults: FaultConfig) -> None:
        self.rng = rng
        self.history = history
        self.faults = faults
        self.net_faults = NetworkFaults(faults, rng)
        self.fifo = rng.random() < faults.tcp_fifo
        self.network = MemoryNetwork(hook=self.net_faults, fifo=self.fifo)
        self.names = [f"jn{i}:8485" for i in range(n_nodes)]
        self.nodes = {n: SimJournalNode(self, n) for n in self.names}
        self.uri = "qjournal://" + ";".join(self.names) + f"/{JID}"
        self.settings = sim_settings()
        #: every node's edit cache capacity this run (0: disabled, small ones evict and miss often)
        self.edit_cache_bytes = rng.choice(EDIT_CACHE_CHOICES)
        self.jn_settings = jn_settings(self.edit_cache_bytes, self.settings.transfer_chunk_bytes)
        self.background: list[asyncio.Task] = []
        self.http_fetches = 0

    async def start(self) -> None:
        for n in self.names:
            await self.nodes[n].start()

    def new_qjm(self, client_name: str) -> QuorumJournalManager:
        """A new writer or reader: a fresh QuorumJournalManager on the memory network."""
        async def fetch(name: str, segment_txid: int, in_progress_ok: bool) -> SegmentDownload:
            # the reader's HTTP download, simulated (see module docstring): a whole body, in chunks
            body, crc = await self.http_fetch(client_name, name, JID, segment_txid, in_progress_ok)
            return memory_download(body, crc, self.settings.transfer_chunk_bytes)
        return QuorumJournalManager(self.uri, ns_info=NS_INFO, network=self.network,
                                    settings=self.settings, client_name=client_name,
                                    segment_fetcher=fetch)

    async def http_fetch(self, src: str, dst: str, jid: str, segment_txid: int,
                         in_progress_ok: bool, storage_info: str | None = None) -> tuple[bytes, int | None]:
        """A simulated ``GET /getJournal`` from ``src`` to node ``dst`` (its answer: the node's service).

        Obeys partitions and crashes, and the network fault hook's drop and delay
        for the request and for the response.

        Raises:
            TransportError: unreachable, dropped (after the HTTP timeout) or down.
            QJournalError: what the node's Journal raised (e.g. segment not found).
        """
        self.http_fetches += 1
        timeout_s = self.settings.http_read_timeout_ms / 1000.0
        node = self.nodes.get(dst)
        for leg, (a, b) in enumerate([(src, dst), (dst, src)]):
            if self.network.is_blocked(a, b):
                await asyncio.sleep(timeout_s)
                raise TransportError(f"GET /getJournal {src} -> {dst}: timed out (partitioned)")
            delays = self.net_faults(a, b, b"")
            if not delays:
                await asyncio.sleep(timeout_s)
                raise TransportError(f"GET /getJournal {src} -> {dst}: timed out (lost)")
            await asyncio.sleep(min(delays[0], timeout_s))
            if leg == 0:
                if node is None or not node.alive:
                    raise TransportError(f"GET /getJournal {src} -> {dst}: connection refused")
                data, crc = await node.serve_segment(jid, segment_txid, in_progress_ok, storage_info)
        return data, crc

    def disk_states(self) -> list[NodeSegment]:
        """Every segment file on every node's disk (for the history's end state)."""
        out = []
        for n in self.names:
            for fname, data in self.nodes[n].segment_files(JID):
                p = parse_segment_file_name(fname)
                if p is None:
                    continue
                end = p.end_txid if p.end_txid is not None else -1
                out.append(NodeSegment(n, p.start_txid, end, p.end_txid is None, data))
        return out

    async def stop(self) -> None:
        for n in self.names:
            node = self.nodes[n]
            if node.server is not None:
                await node.server.stop()
        for t in self.background:
            if not t.done():
                t.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)

"""A simulated JournalNode cluster on one virtual-time loop: real rules, simulated world.

Why: to run the *real* per-journal JournalNode rules
(:class:`qjournal.journalnode.journal.Journal`) and the *real* quorum client
(:class:`qjournal.client.qjm.QuorumJournalManager`) against seeded network and
disk faults, deterministically, many thousand times.

What is real and what is simulated:

* Real: ``Journal`` (every fencing, contiguity, recovery and crash-repair
  rule), the RPC layer (:mod:`qjournal.transport.server`: framing, ordering,
  timeouts, typed errors) over the in-memory network, the whole client
  (``QuorumJournalManager``, ``AsyncLoggerSet``, ``AsyncLogger``,
  ``QuorumOutputStream``, the reader with replica failover).
* Simulated: the disk (:class:`~qjournal.sim.disk.SimJournalStorage` on
  :class:`~qjournal.sim.disk.SimFS`), the network's faults
  (:class:`~qjournal.sim.faults.NetworkFaults`), the clock
  (:class:`~qjournal.sim.loop.VirtualTimeLoop`) and the JournalNode's
  *networking shell*: :class:`SimJournalNode` maps the RPC table of
  docs/architecture.md onto ``Journal`` calls, as the daemon does, and serves
  ``/getJournal`` downloads (accept-recovery and readers) through a simulated
  HTTP fetch that obeys partitions, crashes and the network's drop/delay. The
  production daemon's shell runs ``Journal`` calls on a worker thread and
  serves HTTP with aiohttp; neither can run on a virtual clock. The simulated
  HTTP hands over whole bodies (the only place that holds one); the readers
  and the JournalNodes' downloads then consume them in chunks of
  ``transfer_chunk_bytes`` (small here, so records straddle chunks), the
  downloads yielding to the loop between chunks as the daemon does.

Observation for the checker (server side, exact): a successful ``new_epoch``
adds a ``Promise``; a successful ``journal`` an ``Accepted``; a successful
``finalize_log_segment`` a ``Finalized``; each is recorded when the ``Journal``
call returned, i.e. when the node's state changed, whether or not the reply
reaches the writer.

Invariants:

1. A crashed node runs no more code against its disk: every handler checks
   its incarnation after each ``await`` (a stale handler of a previous
   incarnation raises instead of touching the restarted node's state).
2. A crash loses exactly what :class:`SimFS` says is not durable.
3. Everything is ordered by the loop and drawn from the loop's ``rng``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import crc32c

from qjournal.client.qjm import QuorumJournalManager
from qjournal.client.settings import QJMSettings
from qjournal.errors import InvariantViolation, JournalError, QJournalError, TransportError
from qjournal.journalnode.journal import FAULT_POINTS, SYNC_FAULT_POINTS, Journal
from qjournal.journalnode.syncer import JournalSyncer, SyncerSettings
from qjournal.protocol.messages import Manifest, NamespaceInfo, RequestInfo, SegmentState
from qjournal.protocol.segment import iter_records, parse_segment_file_name, segment_file_name
from qjournal.sim.disk import SimFS, SimJournalStorage, SimulatedCrash
from qjournal.sim.faults import FaultConfig, NetworkFaults
from qjournal.sim.history import Accepted, Failure, Finalized, History, NodeSegment, Note, Promise
from qjournal.transport import MemoryNetwork, RpcServer
from qjournal.transport.download import SegmentDownload, memory_download
from qjournal.transport import current_peer, memory_connector

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


class _NodeDown(TransportError):
    """The node crashed while handling this call (the reply is never delivered)."""


class SimJournalNode:
    """One JournalNode: ``Journal`` objects on a SimFS, served over the memory network.

    Args:
        cluster: the owning cluster.
        name: the node's network name (``host:port``, as written in the URI).
    """

    rpc_concurrent = ("get_edit_log_manifest", "get_journal_state", "get_journaled_edits")

    def __init__(self, cluster: "SimCluster", name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.fs = SimFS(cluster.rng, name=name)
        self.alive = False
        self.incarnation = 0
        self.journals: dict[str, Journal] = {}
        self.server: RpcServer | None = None
        self.armed_point: tuple[str, int] | None = None  # Journal fault point, countdown
        self.stats: dict[str, int] = {}
        self._syncer: JournalSyncer | None = None  # of the current incarnation

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start (or restart) the node: a new incarnation that rereads its disk lazily."""
        assert not self.alive, f"{self.name} is already running"
        self.incarnation += 1
        self.journals = {}
        self._syncer = None
        self.server = RpcServer(self, name=self.name)
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
        self.journals = {}
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

    def _journal(self, jid: str) -> Journal:
        j = self.journals.get(jid)
        if j is None:
            storage = SimJournalStorage(
                self.fs, f"/{self.name}/{jid}",
                on_crash=lambda: self.crash_now("storage crash point"),
                on_note=lambda kind, detail: self.cluster.history.add(Note(kind, self.name, detail)),
                preallocate_bytes=PREALLOCATE_BYTES)
            j = Journal(jid, storage, clock=asyncio.get_running_loop().time,
                        fault_hook=self._fault_point, edit_cache_bytes=self.cluster.edit_cache_bytes,
                        read_chunk_bytes=self.cluster.settings.transfer_chunk_bytes)
            self.journals[jid] = j
        return j

    # -- the call wrapper ----------------------------------------------------------------
    def _call(self, what: str, fn, *args):
        """Run one synchronous Journal call; translate a simulated crash (invariant 1)."""
        if not self.alive:
            raise _NodeDown(f"{self.name} is down ({what})")
        try:
            return fn(*args)
        except SimulatedCrash as e:
            raise _NodeDown(f"{self.name} crashed in {what} at {e.point}") from None
        except InvariantViolation as e:
            self.cluster.history.add(Failure(self.name, type(e).__name__, f"{what}: {e}"))
            raise
        except QJournalError:
            raise
        except OSError as e:
            # as the daemon's shell (journalnode/node.py) does: a storage error reaches the
            # client typed, naming the journal
            key = f"jn_storage_error:{what}"
            self.stats[key] = self.stats.get(key, 0) + 1
            raise JournalError(f"{self.name}: storage error in {what}: {e}", node=self.name) from e
        except Exception as e:
            self.cluster.history.add(Failure(self.name, type(e).__name__, f"{what}: {e}"))
            raise

    def _check_incarnation(self, inc: int, what: str) -> None:
        if not self.alive or self.incarnation != inc:
            raise _NodeDown(f"{self.name} crashed during {what}")

    # -- RPC handlers (docs/architecture.md, JournalNode RPC) -----------------------------
    async def rpc_is_formatted(self, jid: str) -> bool:
        return self._call("is_formatted", lambda: self._journal(jid).is_formatted())

    async def rpc_format(self, jid: str, ns_info: dict, force: bool = False) -> None:
        self._call("format", lambda: self._journal(jid).format(NamespaceInfo.from_wire(ns_info), force))

    async def rpc_get_journal_state(self, jid: str) -> dict:
        def f():
            j = self._journal(jid)
            return replace(j.get_journal_state(), http_port=80, http_url=f"http://{self.name}",
                           ns_info=j.ns_info).to_wire()
        return self._call("get_journal_state", f)

    async def rpc_new_epoch(self, jid: str, ns_info: dict, epoch: int) -> dict:
        peer = current_peer()
        res = self._call("new_epoch", lambda: self._journal(jid).new_epoch(
            NamespaceInfo.from_wire(ns_info), int(epoch)))
        self.cluster.history.add(Promise(self.name, int(epoch), peer.address if peer else "?"))
        return res.to_wire()

    async def rpc_start_log_segment(self, req: dict, txid: int, layout_version: int) -> None:
        r = RequestInfo.from_wire(req)
        self._call("start_log_segment", lambda: self._journal(r.jid).start_log_segment(
            r, int(txid), int(layout_version)))

    async def rpc_journal(self, req: dict, segment_txid: int, first_txid: int, num_txns: int,
                          records: bytes) -> None:
        r = RequestInfo.from_wire(req)
        self._call("journal", lambda: self._journal(r.jid).journal(
            r, int(segment_txid), int(first_txid), int(num_txns), records))
        self.cluster.history.add(Accepted(self.name, r.epoch, int(first_txid),
                                          int(first_txid) + int(num_txns) - 1))

    async def rpc_heartbeat(self, req: dict) -> None:
        r = RequestInfo.from_wire(req)
        self._call("heartbeat", lambda: self._journal(r.jid).heartbeat(r))

    async def rpc_finalize_log_segment(self, req: dict, start_txid: int, end_txid: int) -> None:
        r = RequestInfo.from_wire(req)
        self._call("finalize_log_segment", lambda: self._journal(r.jid).finalize_log_segment(
            r, int(start_txid), int(end_txid)))
        self.cluster.history.add(Finalized(self.name, r.epoch, int(start_txid), int(end_txid)))

    async def rpc_purge_logs(self, req: dict, min_txid_to_keep: int) -> None:
        r = RequestInfo.from_wire(req)
        self._call("purge_logs", lambda: self._journal(r.jid).purge_logs_older_than(
            r, int(min_txid_to_keep)))

    async def rpc_get_edit_log_manifest(self, jid: str, since_txid: int, in_progress_ok: bool,
                                        with_digests: bool = False) -> dict:
        m: Manifest = self._call("get_edit_log_manifest", lambda: self._journal(jid).get_edit_log_manifest(
            int(since_txid), bool(in_progress_ok), bool(with_digests)))
        return m.to_wire()

    async def rpc_get_journaled_edits(self, jid: str, since_txid: int, max_txns: int) -> dict:
        return self._call("get_journaled_edits", lambda: self._journal(jid).get_journaled_edits(
            int(since_txid), int(max_txns), EDIT_CACHE_MAX_ANSWER_BYTES)).to_wire()

    async def rpc_prepare_recovery(self, req: dict, segment_txid: int) -> dict:
        r = RequestInfo.from_wire(req)
        res = self._call("prepare_recovery", lambda: self._journal(r.jid).prepare_recovery(
            r, int(segment_txid)))
        return res.to_wire()

    async def rpc_accept_recovery(self, req: dict, segment_state: list, from_url: str) -> None:
        r = RequestInfo.from_wire(req)
        state = SegmentState.from_wire(segment_state)
        inc = self.incarnation
        plan = self._call("accept_recovery", lambda: self._journal(r.jid).accept_recovery_plan(r, state))
        if not plan.download:
            self._note_kept_copy(r.jid, state, from_url)
            self._note_unsynced_copy(r.jid, state)
        if plan.download:
            src, seg_txid = _parse_get_journal_url(from_url)
            body, crc = await self.cluster.http_fetch(self.name, src, r.jid, seg_txid, True)
            if crc is not None and crc32c.crc32c(body) != crc:
                raise TransportError(f"{self.name}: download of segment {seg_txid} from {src} "
                                     f"failed its checksum", node=self.name)
            await self._write_download(inc, r.jid, plan.tmp_name, body, "accept_recovery")
        self._check_incarnation(inc, "accept_recovery download")
        self._call("accept_recovery", lambda: self._journal(r.jid).accept_recovery_commit(plan))

    async def _write_download(self, inc: int, jid: str, tmp_name: str, body: bytes, what: str) -> None:
        """Write a downloaded body to the journal's tmp file chunk by chunk, yielding to the loop
        between chunks (other calls of the journal interleave, as on the daemon's thread); a failed
        download's tmp file is deleted, as the daemon does."""
        n = self.cluster.settings.transfer_chunk_bytes
        try:
            self._check_incarnation(inc, f"{what} download")
            self._call(what, lambda: self._journal(jid).begin_download(tmp_name))
            for i in range(0, len(body), n):
                await asyncio.sleep(0)
                self._check_incarnation(inc, f"{what} download")
                self._call(what, lambda i=i: self._journal(jid).append_download(tmp_name, body[i:i + n]))
        except _NodeDown:
            raise
        except QJournalError:
            if self.alive and self.incarnation == inc:
                self._call(what, lambda: self._journal(jid).discard_download(tmp_name))
            raise

    def _note_kept_copy(self, jid: str, state: SegmentState, from_url: str) -> None:
        """Observation for known-bug attribution (KB3): accept_recovery kept this node's copy
        because it has the chosen length; record whether its records differ from the source's.
        Reads the source's disk directly: an oracle, no effect on the run."""
        try:
            src, _ = _parse_get_journal_url(from_url)
            other = self.cluster.nodes.get(src)
            if other is None or other is self or not other.alive:
                return
            mine = _records_upto(self.serve_segment(jid, state.start_txid, True)[0], state.end_txid)
            theirs = _records_upto(other.serve_segment(jid, state.start_txid, True)[0], state.end_txid)
        except (QJournalError, _NodeDown):
            return
        if mine != theirs:
            self.cluster.history.add(Note("accept_kept_different", self.name,
                                          f"segment {state.start_txid} {state.end_txid} from {src}"))

    def _note_unsynced_copy(self, jid: str, state: SegmentState) -> None:
        """Observation for KB1: the kept copy (no download) still has unsynced bytes when the
        paxos decision is about to be persisted over it."""
        path = f"/{self.name}/{jid}/current/{segment_file_name(state.start_txid)}"
        try:
            ino = self.fs._ino(path)
        except FileNotFoundError:
            return
        if bytes(ino.visible) != ino.durable:
            self.cluster.history.add(Note("accept_unsynced", self.name,
                                          f"segment {state.start_txid}"))

    # -- the JournalNodeSyncer ---------------------------------------------------------------
    def syncer(self) -> JournalSyncer:
        """This incarnation's syncer (the real one): peers over the memory network, downloads
        through the simulated HTTP, every journal call through ``_call`` (invariant 1)."""
        if self._syncer is None:
            inc = self.incarnation

            async def journal_call(method: str, *args):
                self._check_incarnation(inc, f"sync:{method}")
                return self._call(f"sync:{method}", lambda: getattr(self._journal(JID), method)(*args))

            async def download(url: str, tmp_name: str) -> int:
                src, seg_txid = _parse_get_journal_url(url)
                body, crc = await self.cluster.http_fetch(self.name, src, JID, seg_txid, False)
                if crc is not None and crc32c.crc32c(body) != crc:
                    raise TransportError(f"{self.name}: sync download of segment {seg_txid} from {src} "
                                         f"failed its checksum", node=self.name)
                await self._write_download(inc, JID, tmp_name, body, "sync:download")
                return len(body)
            peers = [tuple(n.rsplit(":", 1)) for n in self.cluster.names if n != self.name]
            s = self.cluster.settings
            self._syncer = JournalSyncer(
                JID, [(h, int(p)) for h, p in peers], journal_call,
                memory_connector(self.cluster.network, self.name,
                                 connect_timeout_ms=s.connect_timeout_ms),
                download, SyncerSettings(interval_s=0.0, rpc_timeout_ms=s.select_input_streams_timeout_ms),
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
    def serve_segment(self, jid: str, segment_txid: int, in_progress_ok: bool) -> tuple[bytes, int]:
        """What ``GET /getJournal`` would answer: the segment bytes and their CRC32C.

        Raises:
            _NodeDown, SegmentNotFoundError, JournalNotFormattedError
        """
        def f():
            seg = self._journal(jid).open_segment_for_read(int(segment_txid), bool(in_progress_ok))
            try:
                data = seg.stream.read(seg.length)
            finally:
                seg.stream.close()
            return data
        data = self._call("getJournal", f)
        return data, crc32c.crc32c(data)

    def segment_files(self, jid: str) -> list[tuple[str, bytes]]:
        """``(file name, bytes)`` of every segment file of ``jid`` on this node's disk, sorted."""
        root = f"/{self.name}/{jid}/current"
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


def _parse_get_journal_url(url: str) -> tuple[str, int]:
    u = urlsplit(url)
    q = parse_qs(u.query)
    try:
        return u.netloc, int(q["segmentTxId"][0])
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
                         in_progress_ok: bool) -> tuple[bytes, int]:
        """A simulated ``GET /getJournal`` from ``src`` to node ``dst``.

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
                data, crc = node.serve_segment(jid, segment_txid, in_progress_ok)
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

"""The JournalNode's request handling, written once: QJournalProtocol mapped onto ``Journal``.

Why one object for the daemon and the simulator: the simulator is the project's main proof, and
it must prove the code that runs in production. The daemon (``node.py``) and the simulator
(``sim/journalnodes.py``) both serve the QJournalProtocol through this :class:`JournalNodeService`;
what differs between them is behind a narrow host (:class:`JournalNodeHost`): how a journal's calls
run (on the journal's own thread, or a simulated one), how a URL is downloaded in chunks (aiohttp,
or the simulator's HTTP), the clock, the storage, the crash points, and what is observed. So every
seed of the simulators runs the daemon's argument checks, epoch-checked dispatch, ordering and
thread rules, inline-write decision, accept-recovery download, digests and syncer wiring.

Theory of operation:

* The protocol is the table :data:`qjournal.protocol.protocols.QJOURNAL`: this service names it
  (``rpc_protocols``), so the RPC server refuses unknown and missing arguments and decodes each
  one (``RequestInfo``, ``NamespaceInfo``, ``SegmentState``, ints, bytes, journal ids) before a
  ``rpc_<method>`` runs, and runs the table's concurrent calls (the reads) beside a connection's
  FIFO writes.
* One :class:`_JournalSlot` per journal id, created on the first call that names it (up to
  ``max_journals``), holds the ``Journal`` and its *thread* (the host's; None: calls run inline).
  Every call of a journal runs there, so the calls of one journal stay serialized in arrival
  order while other journals, and HTTP reads, proceed (``Journal``'s one-call-at-a-time rule).
* The write calls of the commit path (``journal``, ``heartbeat``) run inline on the event loop,
  fsync included, when nothing of their journal is on its thread, no other journal was written in
  the last second, the batch is at most 1 MiB, and the journal's last write call took at most
  ``inline_write_max_s``. A thread hop costs each call two wake-ups and about 100 µs of CPU, 40% of
  a one-record commit (docs/performance.md, "Commit path"); the price is that the loop waits for
  that fsync. A slower call sends the journal's write calls to its thread for
  :data:`THREAD_AFTER_SLOW_S` and until one is fast again there. A batch of at most 4 MiB is
  validated on the loop first, overlapping the fsync of the previous one on the thread.
* ``get_journaled_edits`` runs on the loop, never behind the thread's fsyncs (the ``Journal`` call
  made for that), and a finalized segment's digest on any thread (``finalized_digest``): the two
  documented exceptions of the one-call-at-a-time rule.
* ``accept_recovery`` is split: the plan on the journal's thread, the download on the loop, then the
  commit on the thread. A download (accept-recovery's, the syncer's) streams: each chunk of at most
  ``transfer_chunk_bytes`` is appended to the journal's tmp file on its thread before the next is
  read, the ``X-Qjournal-Crc32c`` header is checked over the chunks at the end, and a failed
  download's tmp file is deleted; one download per tmp file at a time.
* ``serve_segment`` is ``GET /getJournal``'s work (the aiohttp server, the memory network's
  ``mem://`` URLs, the simulator's HTTP): checks, then the segment's CRC32C and its bytes in chunks,
  read off the loop.
* Observation (:class:`Promised`, :class:`Accepted`, :class:`Finalized`, :class:`RecoveryPlanned`):
  told to the host right after the ``Journal`` call returned, before any other code of this node
  runs, so a checker sees exactly the states the node reached (the daemon ignores them).
* Errors: a ``QJournalError`` or ``InvariantViolation`` from the Journal goes back typed. A storage
  ``OSError`` becomes ``JournalError`` naming the journal. Nothing a client sends can stop the node.

Invariants:

1. All calls of one journal id execute one at a time, in the order this service dispatched them
   (except the two reads above, which ``Journal`` allows anywhere).
2. A reply is sent only after the Journal call returned (so after every fsync the call made).
3. Bad arguments (types, journal ids) are refused with ``InvalidRequestError`` before any Journal
   is touched (the table, then ``journal_slot``).
4. Every Journal call passes through the host's ``guard`` (a simulated crash stops the node there).
"""

from __future__ import annotations

import asyncio
import errno
import io
import functools
import logging
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Callable, Protocol

from qjournal.errors import (ConfigError, InvalidRequestError, JournalError, QJournalError, SegmentNotFoundError,
                             TransportError)
from qjournal.journalnode.journal import AcceptRecoveryPlan, Journal, ReadableSegment
from qjournal.journalnode.storage import JournalStorage
from qjournal.journalnode.syncer import JournalSyncer, SyncerSettings
from qjournal.protocol import jn_rules
from qjournal.protocol.messages import NamespaceInfo, RequestInfo, SegmentState, parse_storage_info
from qjournal.protocol.protocols import QJOURNAL
from qjournal.protocol.segment import DEFAULT_MAX_RECORD_BYTES, LAYOUT_VERSION, crc32c, validate_batch
from qjournal.transport import PeerInfo, RpcConnector
from qjournal.transport.download import SegmentDownload
from qjournal.transport.http import Throttle

__all__ = ["JournalNodeService", "JournalNodeHost", "JournalThread", "JournalNodeSettings", "Promised",
           "Accepted", "Finalized", "RecoveryPlanned", "JournalEvent", "THREAD_AFTER_SLOW_S"]

log = logging.getLogger(__name__)

#: batches up to this size are validated on the event loop thread (about 1 ms per 128 KiB)
LOOP_VALIDATE_MAX_BYTES = 4 << 20
#: larger batches are written on the journal's thread, never inline (module docstring)
INLINE_WRITE_MAX_BYTES = 1 << 20
#: after a write call slower than ``inline_write_max_s``, its journal's write calls run on the
#: journal's thread for at least this long
THREAD_AFTER_SLOW_S = 30.0
#: a write call of another journal within this window keeps write calls on their threads
OTHER_WRITER_WINDOW_S = 1.0


@dataclass(frozen=True)
class JournalNodeSettings:
    """Limits of the service (the daemon reads them from configuration, :meth:`from_conf`).

    Attributes:
        max_journals: ``qjournal.journalnode.max-journals``.
        max_record_bytes: ``dfs.namenode.max.op.size``.
        edits_answer_max_bytes: bytes of one ``get_journaled_edits`` answer beyond its first batch
            (the daemon: half of ``ipc.maximum.data.length``).
        slow_sync_warn_s: ``qjournal.journalnode.slow-sync.warn.ms``.
        inline_write_max_s: ``qjournal.journalnode.inline-write.max.ms`` (0: never inline).
        edit_cache_bytes: ``dfs.journalnode.edit-cache-size.bytes`` when in-progress tailing is on, else 0.
        download_max_bytes: ``qjournal.journalnode.recovery-download.max.bytes``.
        transfer_chunk_bytes: ``qjournal.segment-transfer.chunk.bytes``.
        transfer_bytes_per_s: ``dfs.edit.log.transfer.bandwidthPerSec`` (0: no limit).
    """

    max_journals: int = 100
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    edits_answer_max_bytes: int = 32 << 20
    slow_sync_warn_s: float = 1.0
    inline_write_max_s: float = 0.02
    edit_cache_bytes: int = 0
    download_max_bytes: int = 1 << 30
    transfer_chunk_bytes: int = 1 << 20
    transfer_bytes_per_s: int = 0

    @classmethod
    def from_conf(cls, c: Any) -> "JournalNodeSettings":
        """The settings of a :class:`~qjournal.config.Configuration`.

        Raises:
            ConfigError: a malformed or out-of-range key (named).
        """
        cache_bytes = c.get_bytes("dfs.journalnode.edit-cache-size.bytes") or 0
        if cache_bytes < 0:
            raise ConfigError(f"dfs.journalnode.edit-cache-size.bytes must not be negative, got {cache_bytes}",
                              key="dfs.journalnode.edit-cache-size.bytes")
        chunk = c.get_bytes("qjournal.segment-transfer.chunk.bytes")
        if chunk <= 0:
            raise ConfigError(f"qjournal.segment-transfer.chunk.bytes must be positive, got {chunk}",
                              key="qjournal.segment-transfer.chunk.bytes")
        return cls(
            max_journals=c.get_int("qjournal.journalnode.max-journals"),
            max_record_bytes=c.get_bytes("dfs.namenode.max.op.size") or DEFAULT_MAX_RECORD_BYTES,
            edits_answer_max_bytes=c.get_bytes("ipc.maximum.data.length") // 2,
            slow_sync_warn_s=c.get_duration_ms("qjournal.journalnode.slow-sync.warn.ms") / 1000.0,
            inline_write_max_s=c.get_duration_ms("qjournal.journalnode.inline-write.max.ms") / 1000.0,
            # HDFS-13150: the edit cache exists where in-progress tailing is on (as in Hadoop)
            edit_cache_bytes=cache_bytes if c.get_bool("dfs.ha.tail-edits.in-progress") else 0,
            download_max_bytes=c.get_bytes("qjournal.journalnode.recovery-download.max.bytes"),
            transfer_chunk_bytes=chunk,
            transfer_bytes_per_s=c.get_bytes("dfs.edit.log.transfer.bandwidthPerSec"))


# --- what the host is told (observation) ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Promised:
    """``new_epoch`` returned: the node promised ``epoch`` to the writer at ``peer``."""

    jid: str
    epoch: int
    peer: str


@dataclass(frozen=True, slots=True)
class Accepted:
    """``journal`` returned: txids ``first_txid..last_txid`` of ``epoch`` are durable here."""

    jid: str
    epoch: int
    first_txid: int
    last_txid: int


@dataclass(frozen=True, slots=True)
class Finalized:
    """``finalize_log_segment`` returned."""

    jid: str
    epoch: int
    start_txid: int
    end_txid: int


@dataclass(frozen=True, slots=True)
class RecoveryPlanned:
    """``accept_recovery``'s plan is made (before its download and commit)."""

    jid: str
    plan: AcceptRecoveryPlan
    from_url: str


JournalEvent = Promised | Accepted | Finalized | RecoveryPlanned


# --- the host ------------------------------------------------------------------------------------------

class JournalThread(Protocol):
    """Where the calls of one journal run, one at a time, in submission order."""

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on this thread; its result or its exception."""

    def close(self) -> None:
        """No more calls (a pending one still runs)."""


class JournalNodeHost(Protocol):
    """What the service needs of its process (the daemon's threads and aiohttp, or the simulator).

    Attributes:
        name: the node, in messages.
        http_port, http_url: this node's ``/getJournal`` server (``get_journal_state`` tells writers).
        wall_clock: seconds for the journals' metrics (None: no timing).
        fault_hook: given to every Journal: called at its named crash points.
    """

    name: str
    http_port: int
    http_url: str
    wall_clock: Callable[[], float] | None
    fault_hook: Callable[[str], None] | None

    def open_storage(self, jid: str) -> JournalStorage:
        """The storage of journal ``jid`` (not yet locked)."""

    def has_journal(self, jid: str) -> bool:
        """Whether journal ``jid`` exists in storage (a read never creates one)."""

    def journal_thread(self, jid: str) -> JournalThread | None:
        """The thread journal ``jid``'s calls run on (None: inline on the event loop)."""

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` off the event loop on any thread (reads of files that never change)."""

    def guard(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one Journal call ``fn(*args)`` (named ``what``): where a simulated crash stops the node."""

    async def open_download(self, url: str, chunk_bytes: int) -> SegmentDownload:
        """Start downloading a peer's ``/getJournal`` URL; the body in chunks of at most ``chunk_bytes``.

        Raises:
            InvalidRequestError: an unsupported URL; TransportError, QJournalError: the fetch failed.
        """

    def monotonic(self) -> float:
        """Seconds, for the inline-write decision."""

    def observe(self, event: JournalEvent) -> None:
        """A state this node reached (module docstring: Observation)."""


class _JournalSlot:
    """A Journal and the thread its calls run on (invariant 1).

    Attributes:
        on_thread: calls handed to the thread whose caller has not resumed yet; a call runs
            inline only when this is 0, so calls never overlap and keep their order.
        thread_until: ``host.monotonic()`` before which write calls use the thread (after a slow one).
    """

    __slots__ = ("journal", "thread", "on_thread", "thread_until", "_call")

    def __init__(self, journal: Journal, thread: JournalThread | None, call: Callable[..., Any]) -> None:
        self.journal = journal
        self.thread = thread
        self.on_thread = 0
        self.thread_until = 0.0
        self._call = call

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the journal's thread (inline without one)."""
        if self.thread is None:
            return self._call(fn, *args)
        self.on_thread += 1
        try:
            return await self.thread.run(self._call, fn, *args)
        finally:
            self.on_thread -= 1


class JournalNodeService:
    """QJournalProtocol over ``Journal`` objects (module docstring): the handler of a JournalNode's
    RPC server, the work of its ``/getJournal``, and its syncers' journal side.

    Args:
        host: the process (:class:`JournalNodeHost`).
        settings: limits (:class:`JournalNodeSettings`).
    """

    #: the protocol this handler serves (the RPC server checks and decodes arguments by it)
    rpc_protocols = (QJOURNAL,)

    def __init__(self, host: JournalNodeHost, settings: JournalNodeSettings) -> None:
        self.host = host
        self.settings = settings
        self.journals: dict[str, _JournalSlot] = {}
        self._opening: dict[str, list] = {}   # jid -> [lock, callers using it]
        self._downloads: dict[tuple[str, str], list] = {}  # (jid, tmp file) -> [lock, users]
        self._last_write: tuple[str, float] = ("", -OTHER_WRITER_WINDOW_S)  # (jid, host.monotonic())
        self._closed = False

    # --- running Journal calls ------------------------------------------------------------------

    def _call(self, jid: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One Journal call, through the host's guard (invariant 4); a storage error is logged here, on this
        node (the caller only sees it in its own log otherwise), and answered typed, its errno named."""
        try:
            return self.host.guard(_name(fn), fn, *args)
        except OSError as e:
            raise storage_error(jid, _name(fn), e) from e

    async def journal_slot(self, jid: Any, *, create: bool = True) -> _JournalSlot:
        """The slot of ``jid``, opening the journal on first use.

        Args:
            jid: the journal id (validated).
            create: False: only journals that exist in storage (HTTP reads).

        Raises:
            InvalidRequestError: bad jid or too many journals.
            SegmentNotFoundError: ``create`` is False and the journal does not exist.
            JournalLockedError, JournalError: the journal cannot be opened.
        """
        jid = jn_rules.validate_jid(jid)
        slot = self.journals.get(jid)
        if slot is not None:
            return slot
        entry = self._opening.setdefault(jid, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                return await self._open_slot(jid, create)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._opening.pop(jid, None)  # bounded: no lock is left behind for refused jids

    async def _open_slot(self, jid: str, create: bool) -> _JournalSlot:
        """Open the journal ``jid`` (called with its opening lock held)."""
        slot = self.journals.get(jid)
        if slot is not None:
            return slot
        if self._closed:
            raise JournalError(f"journal {jid}: {self.host.name} is shutting down", jid=jid)
        if not create and not self.host.has_journal(jid):
            raise SegmentNotFoundError(f"journal {jid}: no such journal on this node", jid=jid)
        if len(self.journals) >= self.settings.max_journals:
            raise InvalidRequestError(
                f"journal {jid}: this node already serves {len(self.journals)} journals, the limit "
                f"of qjournal.journalnode.max-journals", jid=jid)
        s, host = self.settings, self.host
        thread = host.journal_thread(jid)
        call = functools.partial(self._call, jid)

        def open_journal() -> Journal:
            return Journal(jid, host.open_storage(jid), clock=host.wall_clock, monotonic=host.monotonic,
                           fault_hook=host.fault_hook,
                           max_record_bytes=s.max_record_bytes, slow_sync_warn_s=s.slow_sync_warn_s,
                           read_chunk_bytes=s.transfer_chunk_bytes, edit_cache_bytes=s.edit_cache_bytes)
        try:
            journal = call(open_journal) if thread is None else await thread.run(call, open_journal)
        except BaseException:
            if thread is not None:
                thread.close()
            raise
        slot = _JournalSlot(journal, thread, call)
        self.journals[jid] = slot
        log.info("journal %s: opened on %s (formatted=%s, promised epoch %d, writer epoch %d, highest txid %d)",
                 jid, host.name, journal.is_formatted(), journal.last_promised_epoch, journal.last_writer_epoch,
                 journal.highest_written_txid)
        return slot

    async def run(self, jid: Any, method: str, *args: Any) -> Any:
        """``Journal.<method>(*args)`` of ``jid`` on its thread; ``sync.<call>`` names a call of its sync
        installer (the syncer's journal calls)."""
        slot = await self.journal_slot(jid)
        return await slot.run(functools.reduce(getattr, method.split("."), slot.journal), *args)

    async def _run_write(self, slot: _JournalSlot, fn: Callable[..., Any], *args: Any, nbytes: int = 0) -> Any:
        """A write call of the commit path (``journal``, ``heartbeat``): inline on the event loop or on
        the journal's thread (module docstring)."""
        if slot.thread is None:
            return slot._call(fn, *args)
        jid = slot.journal.jid
        clock = self.host.monotonic
        now = clock()
        other_writer = self._last_write[0] != jid and now - self._last_write[1] < OTHER_WRITER_WINDOW_S
        self._last_write = (jid, now)
        limit = self.settings.inline_write_max_s
        if (slot.on_thread == 0 and now >= slot.thread_until and not other_writer
                and nbytes <= INLINE_WRITE_MAX_BYTES and limit > 0):
            try:
                return slot._call(fn, *args)
            finally:
                took = clock() - now
                if took > limit:
                    slot.thread_until = clock() + THREAD_AFTER_SLOW_S
                    log.warning("journal %s: a write call took %.0f ms on the event loop (more than "
                                "qjournal.journalnode.inline-write.max.ms); write calls run on the "
                                "journal's thread for %.0f s", jid, took * 1000, THREAD_AFTER_SLOW_S)

        def timed() -> tuple[Any, float]:  # timed on the thread that runs it
            t0 = clock()
            return fn(*args), clock() - t0
        timed.__name__ = _name(fn)
        result, took = await slot.run(timed)
        if took > limit:
            slot.thread_until = max(slot.thread_until, clock() + THREAD_AFTER_SLOW_S)
        return result

    async def close(self) -> None:
        """Close every journal (its storage released); later calls are refused. Idempotent."""
        self._closed = True
        slots, self.journals = self.journals, {}
        for jid in sorted(slots):
            slot = slots[jid]
            try:
                await slot.run(slot.journal.close)
            except Exception as e:  # noqa: BLE001 - closing must go on for the others
                log.warning("journal %s: close failed: %s", jid, e)
            finally:
                if slot.thread is not None:
                    slot.thread.close()

    # --- QJournalProtocol (the rows of protocols.QJOURNAL; arguments arrive decoded) ------------

    async def rpc_is_formatted(self, jid: str) -> bool:
        """Whether journal ``jid`` is formatted."""
        return await self.run(jid, "is_formatted")

    async def rpc_format(self, jid: str, ns_info: NamespaceInfo, force: bool = False) -> None:
        """Format ``jid`` for ``ns_info``. Raises: JournalAlreadyFormattedError without ``force``."""
        await self.run(jid, "format", ns_info, force)

    async def rpc_get_journal_state(self, jid: str) -> dict:
        """``{last_promised_epoch, http_port, http_url, ns_info}``. Raises: JournalNotFormattedError."""
        slot = await self.journal_slot(jid)
        st = await slot.run(slot.journal.get_journal_state)
        return replace(st, http_port=self.host.http_port, http_url=self.host.http_url,
                       ns_info=slot.journal.ns_info).to_wire()

    async def rpc_new_epoch(self, jid: str, ns_info: NamespaceInfo, epoch: int, _peer: PeerInfo | None = None) -> dict:
        """Promise ``epoch``; ``{last_segment_txid}``.

        Raises:
            EpochError, NamespaceMismatchError, JournalNotFormattedError, JournalRejoiningError.
        """
        slot = await self.journal_slot(jid)
        resp = await slot.run(slot.journal.new_epoch, ns_info, epoch)
        self.host.observe(Promised(slot.journal.jid, epoch, _peer.address if _peer is not None else "?"))
        return resp.to_wire()

    async def rpc_start_log_segment(self, req: RequestInfo, txid: int, layout_version: int = LAYOUT_VERSION) -> None:
        """Open segment ``txid``. Raises: EpochError, JournalOutOfSyncError, JournalNotFormattedError."""
        await self.run(req.jid, "start_log_segment", req, txid, layout_version)

    async def rpc_journal(self, req: RequestInfo, segment_txid: int, first_txid: int, num_txns: int,
                          records: bytes) -> None:
        """Append a validated batch, fsynced before the reply.

        Raises:
            EpochError, JournalOutOfSyncError, CorruptRecordError, JournalError.
        """
        slot = await self.journal_slot(req.jid)
        # Validated here, on the loop, so it overlaps the fsync of the previous batch on the journal's
        # thread; a refused batch is validated again there for the precise error.
        last = None
        if 0 < len(records) <= LOOP_VALIDATE_MAX_BYTES:  # a huge batch is validated off the loop
            last = validate_batch(records, first_txid, num_txns, self.settings.max_record_bytes)
        await self._run_write(slot, functools.partial(slot.journal.journal, req, segment_txid, first_txid,
                                                      num_txns, records, validated_last_txid=last),
                              nbytes=len(records))
        self.host.observe(Accepted(req.jid, req.epoch, first_txid, first_txid + num_txns - 1))

    async def rpc_heartbeat(self, req: RequestInfo) -> None:
        """The request gate only (fencing, committed txid). Raises: EpochError, JournalOutOfSyncError."""
        slot = await self.journal_slot(req.jid)
        await self._run_write(slot, slot.journal.heartbeat, req)

    async def rpc_finalize_log_segment(self, req: RequestInfo, start_txid: int, end_txid: int) -> None:
        """Finalize a segment (idempotent). Raises: EpochError, JournalOutOfSyncError, InvariantViolation."""
        await self.run(req.jid, "finalize_log_segment", req, start_txid, end_txid)
        self.host.observe(Finalized(req.jid, req.epoch, start_txid, end_txid))

    async def rpc_purge_logs(self, req: RequestInfo, min_txid_to_keep: int) -> None:
        """Delete segments and paxos files below ``min_txid_to_keep``. Raises: EpochError, JournalOutOfSyncError."""
        await self.run(req.jid, "purge_logs_older_than", req, min_txid_to_keep)

    async def rpc_get_edit_log_manifest(self, jid: str, since_txid: int, in_progress_ok: bool = False,
                                        with_digests: bool = False) -> dict:
        """``{segments, committed_txid, last_writer_epoch}``; with ``with_digests`` (a peer's syncer)
        every finalized segment carries its digest, computed off the journal's thread.

        Raises:
            JournalNotFormattedError.
        """
        slot = await self.journal_slot(jid)
        m = await slot.run(slot.journal.get_edit_log_manifest, since_txid, in_progress_ok)
        if with_digests:
            m = replace(m, segments=tuple([
                s if s.in_progress else replace(s, digest=await self.finalized_digest(slot, s))
                for s in m.segments]))
        return m.to_wire()

    async def rpc_get_journaled_edits(self, jid: str, since_txid: int, max_txns: int) -> dict:
        """Committed edits from ``since_txid`` out of the edit cache (HDFS-13150): a JournaledEdits
        wire map of at most ``max_txns`` txns and about ``edits_answer_max_bytes``.

        Raises:
            CacheMissError (the reader streams segments instead), JournalNotFormattedError.
        """
        slot = await self.journal_slot(jid)
        # On the loop, not the journal's thread: a tailer never waits behind the fsyncs of later
        # batches (the one Journal call made for that; it touches no storage).
        got = slot._call(slot.journal.get_journaled_edits, since_txid, max_txns,
                         self.settings.edits_answer_max_bytes)
        return got.to_wire()

    async def rpc_prepare_recovery(self, req: RequestInfo, segment_txid: int) -> dict:
        """Paxos phase 1b; a PrepareRecoveryResponse wire map. Raises: EpochError, InvariantViolation."""
        resp = await self.run(req.jid, "prepare_recovery", req, segment_txid)
        return resp.to_wire()

    async def rpc_accept_recovery(self, req: RequestInfo, segment_state: SegmentState, from_url: str) -> None:
        """Paxos phase 2b: plan, download from ``from_url`` if needed (CRC verified), commit.

        Raises:
            EpochError, JournalError (download), InvariantViolation.
        """
        slot = await self.journal_slot(req.jid)
        plan = await slot.run(slot.journal.accept_recovery_plan, req, segment_state)
        self.host.observe(RecoveryPlanned(req.jid, plan, from_url))
        if plan.download:
            await self.download_segment(from_url, slot, plan.tmp_name)
        await slot.run(slot.journal.accept_recovery_commit, plan)

    # --- digests ---------------------------------------------------------------------------------

    async def finalized_digest(self, slot: _JournalSlot, seg: SegmentState) -> int | None:
        """A finalized segment's digest, read off the journal's thread (a first read of a large
        retention window must not stall the writer's calls queued on that thread)."""
        return await self.host.run_blocking(slot._call, slot.journal.sync.finalized_digest, seg.start_txid,
                                            seg.end_txid)

    # --- segment downloads (accept-recovery, the syncer) ---------------------------------------

    async def download_segment(self, url: str, slot: _JournalSlot, tmp_name: str, *,
                               why: str = "accept-recovery", bytes_per_s: int = 0) -> int:
        """Stream a peer's segment into the journal's tmp file ``tmp_name`` (accept-recovery's
        ``.epoch=`` file, the syncer's ``.sync.tmp``): chunks of at most ``transfer_chunk_bytes``,
        each appended on the journal's thread before the next is read, throttled to ``bytes_per_s``,
        the ``X-Qjournal-Crc32c`` header checked over the chunks at the end. One download per tmp
        file at a time (a retried accept waits for the one still running). A failed download's tmp
        file is deleted.

        Returns:
            The bytes written.

        Raises:
            InvalidRequestError: an unsupported URL.
            JournalError: the fetch failed, was too large, or the checksum does not match.
        """
        jid = slot.journal.jid
        key = (jid, tmp_name)
        entry = self._downloads.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                try:
                    return await self._download_to(url, slot, tmp_name, bytes_per_s)
                except (QJournalError, OSError) as e:
                    try:
                        await slot.run(slot.journal.discard_download, tmp_name)
                    except QJournalError as d:
                        log.warning("journal %s: deleting %s after a failed download failed: %s", jid,
                                    tmp_name, d)
                    if isinstance(e, InvalidRequestError):
                        raise
                    raise JournalError(f"journal {jid}: download of {url} for {why} failed: {e}",
                                       jid=jid, url=url) from e
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._downloads.pop(key, None)  # bounded: no lock is left behind

    async def _download_to(self, url: str, slot: _JournalSlot, tmp_name: str, bytes_per_s: int) -> int:
        journal = slot.journal
        limit = self.settings.download_max_bytes
        throttle = Throttle(bytes_per_s, self.settings.transfer_chunk_bytes)
        async with await self.host.open_download(url, throttle.chunk_bytes) as download:
            if download.crc is None:
                raise TransportError(f"{url} sent no X-Qjournal-Crc32c header", url=url)
            await slot.run(journal.begin_download, tmp_name)
            got = crc = 0
            while (chunk := await download.next_chunk()) is not None:
                got += len(chunk)
                if got > limit:
                    raise TransportError(f"the body is over the limit of {limit} bytes "
                                         f"(qjournal.journalnode.recovery-download.max.bytes)", url=url)
                crc = crc32c(chunk, crc)
                await slot.run(journal.append_download, tmp_name, chunk)
                await throttle.account(len(chunk))
            if crc != download.crc:
                raise TransportError(f"checksum mismatch: header {download.crc:08x}, body {crc:08x} "
                                     f"({got} bytes)", url=url)
            return got

    # --- /getJournal ------------------------------------------------------------------------------

    async def serve_segment(self, jid: Any, segment_txid: int, in_progress_ok: bool, storage_info: str | None,
                            chunk_bytes: int | None = None) -> tuple[str, SegmentDownload]:
        """``GET /getJournal``'s work: the checks, then the segment as a download (its CRC32C computed
        first, in chunks, off the loop; then its bytes in chunks of ``chunk_bytes``, default
        ``transfer_chunk_bytes``). Both passes read exactly the served length over one open file
        (opened on the journal's thread, so a finalize or purge cannot pull it away).

        Returns:
            ``(segment file name, download)``; the caller closes the download.

        Raises:
            InvalidRequestError: bad jid or storageInfo; NamespaceMismatchError: another namespace;
            SegmentNotFoundError, JournalNotFormattedError: no such journal or segment.
        """
        slot = await self.journal_slot(jid, create=False)
        if storage_info:
            ns_id, cluster = parse_storage_info(storage_info)
            await slot.run(slot.journal.check_namespace, ns_id, cluster)
        rs: ReadableSegment = await slot.run(slot.journal.open_segment_for_read, segment_txid, in_progress_ok)
        n = chunk_bytes or self.settings.transfer_chunk_bytes
        try:
            crc = await self.host.run_blocking(_crc_of_prefix, rs.stream, rs.length, n)
            rs.stream.seek(0)
        except OSError as e:
            rs.stream.close()
            raise storage_error(jid, f"reading {rs.file_name} for /getJournal", e) from e
        except BaseException:
            rs.stream.close()
            raise
        return rs.file_name, SegmentDownload(self._chunks(rs, n), crc, length=rs.length, on_close=rs.stream.close,
                                             local_file=rs.stream if _has_fd(rs.stream) else None)

    async def _chunks(self, rs: ReadableSegment, n: int) -> AsyncIterator[bytes]:
        try:
            left = rs.length
            while left > 0:
                part = await self.host.run_blocking(rs.stream.read, min(n, left))
                if not part:
                    raise TransportError(f"{rs.file_name} shrank while being served ({left} bytes missing)")
                left -= len(part)
                yield part
        finally:
            rs.stream.close()

    # --- the JournalNodeSyncer ---------------------------------------------------------------------

    def new_syncer(self, jid: str, peers: list[tuple[str, int]], connect: RpcConnector,
                   settings: SyncerSettings, clock: Callable[[], float] | None = None) -> JournalSyncer:
        """The syncer of journal ``jid``: its journal calls on the journal's thread, its downloads
        streamed and throttled to ``transfer_bytes_per_s``, its digests warmed off the thread."""
        jid = jn_rules.validate_jid(jid)

        async def journal_call(method: str, *args: Any) -> Any:
            return await self.run(jid, method, *args)

        async def download(url: str, tmp_name: str) -> int:
            return await self.download_segment(url, await self.journal_slot(jid), tmp_name, why="the syncer",
                                               bytes_per_s=self.settings.transfer_bytes_per_s)

        async def digest(seg: SegmentState) -> None:
            await self.finalized_digest(await self.journal_slot(jid), seg)
        extra: dict[str, Any] = {} if clock is None else {"clock": clock}
        return JournalSyncer(jid, peers, journal_call, connect, download, settings, warm_digest=digest, **extra)

    # --- status ------------------------------------------------------------------------------------

    async def snapshot(self) -> dict[str, dict]:
        """Per journal: ``{"status", "metrics"}``, sorted by jid (for /jmx, /metrics, /)."""
        out: dict[str, dict] = {}
        for jid in sorted(self.journals):
            slot = self.journals.get(jid)
            if slot is None:
                continue
            try:
                status, metrics = await slot.run(_status_and_metrics, slot.journal)
            except Exception as e:  # noqa: BLE001 - a page must render even if one journal fails
                status, metrics = {"jid": jid, "error": str(e)}, {}
            out[jid] = {"status": status, "metrics": metrics}
        return out


def _name(fn: Callable[..., Any]) -> str:
    """A Journal call's name, for messages (a ``functools.partial`` names its function)."""
    return getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "call")


def _status_and_metrics(journal: Journal) -> tuple[dict, dict]:
    return journal.status(), journal.metrics_snapshot()


def storage_error(jid: str, what: str, e: OSError) -> JournalError:
    """A storage failure of this node as the error its caller gets (``errno`` and its name among the fields: the
    HTTP server answers 503 for it), logged at ERROR here: an operator reading this node's log sees its disk fail,
    whatever the errno (ENOSPC as much as EIO)."""
    name = errno.errorcode.get(e.errno, "") if e.errno else ""
    log.error("journal %s: %s failed on this node's storage: %s%s", jid, what, e,
              f" ({name})" if name else "", extra={"jid": jid, "errno": name or None})
    return JournalError(f"journal {jid}: storage error in {what}: {e}", jid=jid, errno=e.errno,
                        errno_name=name or None)


def _has_fd(stream: Any) -> bool:
    """Whether ``stream`` is an OS file (the daemon's disk), not a simulated one: only those go to ``sendfile``."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
    return True


def _crc_of_prefix(stream: Any, length: int, chunk_bytes: int) -> int:
    """The CRC32C of the first ``length`` bytes of ``stream``, read in chunks from the start.

    Raises:
        OSError: the file is shorter than ``length``.
    """
    stream.seek(0)
    crc = 0
    left = length
    while left > 0:
        chunk = stream.read(min(chunk_bytes, left))
        if not chunk:
            raise OSError(f"file is shorter than the {length} bytes to serve")
        crc = crc32c(chunk, crc)
        left -= len(chunk)
    return crc

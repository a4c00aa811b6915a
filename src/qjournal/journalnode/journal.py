"""The per-journal acceptor of a JournalNode: a plain synchronous object.

Why synchronous and storage-injected (STYLE principle 1): every rule of the
JournalNode (fencing, txid contiguity, the Paxos acceptor of segment
recovery, crash recovery on open) lives here, with no asyncio, socket, clock
or fsync inside. Storage comes in through :class:`JournalStorage`, whose every
durable step is a separate call, so the simulator can crash the node between
any two of them and check that the reopened ``Journal`` is consistent. The
JournalNode's service (``service.py``) runs one ``Journal`` per journal id, one
call at a time, and does the networking (including the HTTP download of
accept-recovery, which is why that call is split in a plan and a commit).

A journal is three objects with one rule: this acceptor (Hadoop's Journal: the
writer's and the recovery's calls), its :class:`~qjournal.journalnode.segment_index.SegmentIndex`
(which segment files exist and what each holds, scanned once) and its
:class:`~qjournal.journalnode.sync_installer.SyncInstaller` (``journal.sync``: the
JournalNodeSyncer's digests, plans, installs and rejoin). All three run under one
:class:`~qjournal.journalnode.call_rule.CallRule` [I13].

Theory of operation (HDFS-3077, seed 000 §2; reference §3):

* Durable state: ``VERSION`` (the namespace), ``last-promised-epoch`` (the
  Paxos promise), ``last-writer-epoch`` (the epoch that last started a
  segment; recovery compares it, seed 000 §2.4), ``committed-txid`` (best
  effort, never needed for safety), the segment files and ``paxos/<start>``
  (the value accepted for a segment under recovery).
* Write path: ``start_log_segment`` opens ``edits_inprogress_<txid>`` (header
  fsynced), ``journal`` validates a batch with ``scan_batch`` and appends it
  with one write and one fdatasync, ``finalize_log_segment`` renames it.
* Recovery path: ``new_epoch`` (promise), ``prepare_recovery`` (phase 1b:
  report accepted value or on-disk state), ``accept_recovery_plan`` /
  ``accept_recovery_commit`` (phase 2b: make the segment equal to the chosen
  one, persisting the paxos data as the commit point).
* Downloads (accept-recovery's, the syncer's) never pass through memory whole:
  the daemon writes them chunk by chunk to their tmp file (``begin_download``,
  ``append_download``, ``discard_download``), and the commit
  (``accept_recovery_commit``, ``install_synced_segment``) scans that file in
  chunks of ``read_chunk_bytes`` before anything durable depends on it.
* Read path: ``get_edit_log_manifest`` and ``open_segment_for_read`` answer
  from an in-memory index of segment extents (valid length, last txid), so
  no request rescans a segment (HDFS-16793). ``get_journaled_edits`` answers
  a tailer from the edit cache (``edit_cache.py``, HDFS-13150), which every
  durable batch enters after its fsync.

Invariants (cited in the code as [In]):

1. Every epoch-checked call passes one gate, ``_check`` ->
   :func:`~qjournal.protocol.jn_rules.check_request`; a newer epoch is
   persisted (write_atomic) before anything else happens and before the reply.
2. ``last_writer_epoch`` changes only in ``start_log_segment`` (and is reset by
   ``format``); it is durable before the segment file is created.
3. A ``journal`` batch is acknowledged only after its records were validated
   (checksums, consecutive txids starting at the writer's next txid, count;
   :func:`validate_batch`, equivalent to ``segment.scan_batch``)
   and appended, and (unless every txid in it is already known committed,
   HDFS-3885) fdatasynced. Records of the open segment have consecutive txids.
4. The in-memory index of a segment (``_Extent``) always describes bytes that
   are on the file and acknowledged: ``valid_length`` ends at a record
   boundary, ``last_txid`` is the txid of the record before it. It is updated
   only after the append (and sync) succeeded.
5. An in-progress segment with no valid txn counts as absent: it is moved
   aside to ``.empty`` whenever it is scanned (seed 000 §2.10.5).
6. ``start_log_segment(txid)`` may overwrite an in-progress segment at ``txid``
   only if it holds at most one txn; never a finalized one (reference §2.4).
7. Paxos data is written by atomic replace and is the commit point of
   ``accept_recovery``: the downloaded tmp file (or, without a download, the
   kept copy) is durable (data and directory entry) before it, and the rename
   of the tmp file over the in-progress file comes after it. Reopening, ``prepare_recovery`` and ``accept_recovery``
   roll a half-done accept forward (HDFS-3955); a tmp file without matching
   paxos data is deleted (the commit point was not reached).
8. Accepted epochs only grow: an accept in an epoch lower than the one already
   accepted is ``InvariantViolation`` ("Bad paxos transition").
9. Recovery never discards a txn an older writer reported committed ("would
   discard already-committed txn") and never replaces a finalized segment by
   another value; both are ``InvariantViolation``. A committed txid reported
   in the accepting epoch itself lies in a newer segment (a late accept) and is
   not compared. A copy of the chosen length but other contents (the state's
   ``digest``, seed 000 §2.8) is replaced, never kept.
10. A finalized segment is never un-finalized, and re-finalizing it with
    another end txid is ``InvariantViolation``. Its bytes are fsynced before the
    rename (batches known committed were appended without fsync). A segment
    that is not the requesting writer's open one is finalized only if that
    epoch accepted it in recovery or wrote it itself.
11. Torn tails: after a crash an in-progress segment may end in a partial
    record. It is truncated at the last valid record on open when that is
    safe, i.e. when nothing decodable follows the damage (a partial record
    was never acknowledged: a batch is acked only after its whole write and
    fsync, [I3]). A segment with damage followed by valid-looking records is
    left untouched for the operator; its extent ends at the damage.
12. A failed append or sync leaves no half-written bytes in the index: the file
    is cut back to the indexed length and the segment is closed, so the writer
    is out of sync until its next ``start_log_segment``.
13. One call of a journal at a time: every public call of the acceptor and of its
    sync installer takes the journal's call rule, and a call from a second thread
    while another runs raises ``InvariantViolation`` before it touches anything.
    The two exceptions, which may run on any thread beside a call:
    ``get_journaled_edits`` (the committed pair is one tuple replaced whole, the edit
    cache has its own lock) and ``sync.finalized_digest`` (a finalized file never
    changes [I10]; its cache entry is replaced whole).
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable

from qjournal.errors import (CacheMissError, EpochError, InvalidRequestError, InvariantViolation, JournalError,
                             JournalAlreadyFormattedError, JournalNotFormattedError,
                             JournalOutOfSyncError, JournalRejoiningError, NamespaceMismatchError,
                             SegmentNotFoundError)
from qjournal.journalnode.call_rule import CallRule, one_at_a_time
from qjournal.journalnode.edit_cache import JournaledEditsCache
from qjournal.journalnode.metrics import JournalMetrics
from qjournal.journalnode.segment_index import Extent, SegmentIndex
from qjournal.journalnode.storage import JournalStorage
from qjournal.journalnode.sync_installer import SYNC_TMP_SUFFIX, SyncInstaller
from qjournal.protocol.journal_layout import (COMMITTED_TXID, LAST_PROMISED_EPOCH, LAST_WRITER_EPOCH, PAXOS_DIR,
                                              PURGED_BELOW, REJOIN_TXID, VERSION_FILE, paxos_name)
from qjournal.protocol import jn_rules
from qjournal.protocol.messages import (JournaledEdits, JournalState, Manifest, NamespaceInfo,
                                        NewEpochResponse, PersistedPaxosData, PrepareRecoveryResponse,
                                        RequestInfo, SegmentState)
from qjournal.protocol.segment import (DEFAULT_MAX_RECORD_BYTES, HEADER_SIZE, INVALID_TXID, crc32c,
                                       encode_header, parse_segment_file_name, scan_batch,
                                       scan_segment_chunks, segment_file_name, validate_batch)
from qjournal.protocol.version_file import decode_version, encode_version

__all__ = ["Journal", "AcceptRecoveryPlan", "ReadableSegment", "FAULT_POINTS", "SYNC_FAULT_POINTS",
           "DEFAULT_READ_CHUNK_BYTES"]

log = logging.getLogger(__name__)

_COMMITTED = struct.Struct(">qqI")  # txid, epoch that reported it, crc32c of both


def encode_committed(txid: int, epoch: int) -> bytes:
    """``committed-txid`` content: the txid, the epoch of the writer that reported it, and a
    CRC32C of both (20 bytes, overwritten in place without fsync).

    Better than Hadoop's bare 8 bytes: it is written without fsync, so after a
    crash it may be stale (harmless: it only ever lags) or, on a simulated or
    broken disk, torn; a torn value must read as "unknown", never as a bogus
    larger txid (which would skip fsyncs [I3] and trip the recovery assertions).
    The epoch tells recovery whether the txid belongs to an older writer's
    history [I9].
    """
    head = struct.pack(">qq", txid, epoch)
    return head + crc32c(head).to_bytes(4, "big")


def decode_committed(raw: bytes | None) -> tuple[int, int]:
    """(txid, epoch) stored by :func:`encode_committed`; (INVALID_TXID, 0) when absent or damaged."""
    if raw is None or len(raw) != _COMMITTED.size:
        return INVALID_TXID, 0
    txid, epoch, crc = _COMMITTED.unpack(raw)
    if crc != crc32c(raw[:16]) or txid < 0 or epoch < 0:
        return INVALID_TXID, 0
    return txid, epoch

#: Named points where ``fault_hook(name)`` is called (the simulator raises a crash there).
FAULT_POINTS = (
    "after_promise",            # new epoch persisted, reply not sent
    "after_append",             # batch bytes written, not yet fsynced
    "after_sync",               # batch durable, index not yet updated / not acked
    "before_finalize_rename",
    "after_finalize_rename",    # renamed, directory not yet fsynced, paxos not deleted
    "after_download_tmp",       # tmp file durable, paxos not yet written
    "before_persist_paxos",
    "after_persist_paxos",      # commit point passed, tmp not yet renamed
    "after_accept_rename",      # renamed, directory not yet fsynced
)

#: fault points of the syncer's calls (kept apart: the journal simulator arms FAULT_POINTS by seed)
SYNC_FAULT_POINTS = (
    "before_sync_rename",       # a segment copied by the syncer is durable as .sync.tmp, not yet renamed
)


@dataclass
class _OpenSegment:
    """The segment the current writer appends to."""

    start_txid: int
    name: str
    next_txid: int
    layout_version: int


@dataclass(frozen=True, slots=True)
class AcceptRecoveryPlan:
    """What ``accept_recovery_plan`` decided; handed back to ``accept_recovery_commit``.

    Attributes:
        segment_state: the value to accept.
        epoch: the epoch of the accepting request.
        download: whether the segment must be fetched from the source URL.
        tmp_name: the file the download is written to (``edits_inprogress_<s>.epoch=<e>``).
    """

    segment_state: SegmentState
    epoch: int
    download: bool
    tmp_name: str


@dataclass(frozen=True, slots=True)
class ReadableSegment:
    """A segment opened for reading (``/getJournal``).

    Attributes:
        file_name: the segment file's name.
        length: bytes to serve: the whole file if finalized, the acknowledged
            valid prefix if in progress.
        in_progress: whether the segment is still in progress.
        stream: an open binary file; the caller closes it.
    """

    file_name: str
    length: int
    in_progress: bool
    stream: BinaryIO




def _tmp_accept_name(segment_txid: int, epoch: int) -> str:
    return f"{segment_file_name(segment_txid)}.epoch={epoch}"


#: bytes read at a time when a downloaded tmp file or a finalized segment is scanned (the daemon
#: passes ``qjournal.segment-transfer.chunk.bytes``)
DEFAULT_READ_CHUNK_BYTES = 1 << 20

def _is_download_name(name: str) -> bool:
    """Whether ``name`` is a download's tmp file (never a segment, never durable state)."""
    if name.endswith(SYNC_TMP_SUFFIX):
        seg = parse_segment_file_name(name[:-len(SYNC_TMP_SUFFIX)])
        return seg is not None and not seg.in_progress
    return _parse_tmp_accept_name(name) is not None


def _parse_tmp_accept_name(name: str) -> tuple[int, int] | None:
    base, sep, epoch = name.partition(".epoch=")
    if not sep or not epoch.isdigit():
        return None
    seg = parse_segment_file_name(base)
    if seg is None or not seg.in_progress:
        return None
    return seg.start_txid, int(epoch)


class Journal:
    """One journal id on one JournalNode (the Paxos acceptor of HDFS-3077).

    One call at a time, from any one thread at a time [I13] (enforced: ``call_rule.py``).

    Args:
        jid: the journal id (validated).
        storage: the journal's storage (locked here, released by ``close``).
        clock: wall-clock seconds, for the last journal time (a metric) only; None records none.
        monotonic: seconds of a clock that never jumps, for the sync durations, the slow-sync warning
            and the durations' windows (a wall clock moved by an operator or NTP must not make an fsync
            look slow or negative); None: the wall clock's, as before.
        fault_hook: called with a name from :data:`FAULT_POINTS`; may raise to
            simulate a crash at that point.
        max_record_bytes: ceiling on one record's body (``dfs.namenode.max.op.size``).
        edit_cache_bytes: capacity of the edit cache served by ``get_journaled_edits``
            (``dfs.journalnode.edit-cache-size.bytes``); 0 disables it.
        read_chunk_bytes: bytes read at a time when scanning a downloaded or finalized segment
            (``qjournal.segment-transfer.chunk.bytes``).

    Raises:
        InvalidRequestError: bad jid.
        JournalLockedError: the storage is in use by another Journal.
        JournalError: the storage's durable files are unreadable.
    """

    def __init__(self, jid: str, storage: JournalStorage, *,
                 clock: Callable[[], float] | None = None,
                 monotonic: Callable[[], float] | None = None,
                 fault_hook: Callable[[str], None] | None = None,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 slow_sync_warn_s: float = 1.0,
                 edit_cache_bytes: int = 0,
                 read_chunk_bytes: int = DEFAULT_READ_CHUNK_BYTES) -> None:
        self.jid = jn_rules.validate_jid(jid)
        self.storage = storage
        self.clock = clock
        self.monotonic = monotonic if monotonic is not None else clock
        self.fault_hook = fault_hook
        self.max_record_bytes = max_record_bytes
        self.slow_sync_warn_s = slow_sync_warn_s
        self.read_chunk_bytes = read_chunk_bytes
        self.metrics = JournalMetrics()
        self.ns_info: NamespaceInfo | None = None
        self.last_promised_epoch = 0
        self.last_writer_epoch = 0
        #: (committed txid, epoch of the request that reported it): one tuple, replaced whole, so
        #: get_journaled_edits reads a consistent pair from another thread
        self._committed: tuple[int, int] = (INVALID_TXID, 0)
        self.current_ipc_serial = -1
        self.highest_written_txid = 0
        self._cur: _OpenSegment | None = None
        self.purged_below = 0
        self.rejoin_txid: int | None = None
        self._closed = False
        #: the one-call-at-a-time rule (call_rule.py), shared with the sync installer
        self._rule = CallRule(self.jid)
        #: the segment files and what they hold (segment_index.py)
        self.index = SegmentIndex(self.jid, storage, max_record_bytes, read_chunk_bytes,
                                  lambda name: self._cur is not None and self._cur.name == name)
        #: the JournalNodeSyncer's calls (sync_installer.py)
        self.sync = SyncInstaller(self)
        self.edit_cache = JournaledEditsCache(self.jid, edit_cache_bytes) if edit_cache_bytes > 0 else None
        storage.lock()
        try:
            self._load()
        except BaseException:
            storage.close()
            raise

    # --- helpers ----------------------------------------------------------------------------

    @property
    def committed_txid(self) -> int:
        """The highest txid a writer reported committed (INVALID_TXID when unknown)."""
        return self._committed[0]

    @property
    def committed_epoch(self) -> int:
        """The epoch of the request that reported :attr:`committed_txid`."""
        return self._committed[1]

    def _hook(self, name: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(name)

    def _now(self) -> float | None:
        return self.clock() if self.clock is not None else None

    def _elapsed_clock(self) -> float | None:
        return self.monotonic() if self.monotonic is not None else None

    def _load(self) -> None:
        """Read the durable state and repair what a crash may have left (on open)."""
        st = self.storage
        raw = st.read_small(VERSION_FILE)
        self.ns_info = None if raw is None else decode_version(raw, f"{st.where}/{VERSION_FILE}")
        self.last_promised_epoch = st.read_long(LAST_PROMISED_EPOCH, 0)
        self.last_writer_epoch = st.read_long(LAST_WRITER_EPOCH, 0)
        self._committed = decode_committed(st.read_small(COMMITTED_TXID))
        self.purged_below = st.read_long(PURGED_BELOW, 0)
        rejoin = st.read_long(REJOIN_TXID, -1)
        self.rejoin_txid = None if rejoin < 0 else rejoin
        # Leftovers of write_atomic: the target still holds the old (valid) value.
        removed = False
        for sub in ("", PAXOS_DIR):
            for name in st.list_files(sub):
                if name.endswith(".tmp"):
                    st.delete(f"{sub}/{name}" if sub else name)
                    removed = True
        if removed:
            st.sync_dir()
            st.sync_dir(PAXOS_DIR)
        # Half-done accept-recovery downloads [I7].
        for name in st.list_files():
            parsed = _parse_tmp_accept_name(name)
            if parsed is not None:
                self._roll_forward_accept(parsed[0])
        self._scan_storage()

    def _scan_storage(self) -> int | None:
        """Scan segments newest first; set ``highest_written_txid``.

        Returns:
            The start txid of the newest segment holding at least one txn, or None.
        """
        for start, end, name in reversed(self.index.segments()):
            if end is not None:
                self.highest_written_txid = end
                return start
            ext = self.index.extent(name)
            if ext is None:
                continue  # empty: moved aside [I5]
            self.highest_written_txid = ext.last_txid
            return start
        return None

    def _require_formatted(self) -> NamespaceInfo:
        if self.ns_info is None:
            raise JournalNotFormattedError(f"Journal {self.storage.where} (journal {self.jid}) not formatted",
                                           jid=self.jid)
        return self.ns_info

    def _check(self, req: RequestInfo) -> None:
        """The request gate of every epoch-checked call [I1]."""
        if req.jid != self.jid:
            raise InvalidRequestError(f"request for journal {req.jid!r} reached journal {self.jid!r}",
                                      jid=req.jid)
        self._require_formatted()
        self._apply(jn_rules.check_request(self.last_promised_epoch, self.current_ipc_serial,
                                           self.committed_txid, req))

    def _apply(self, d: jn_rules.RequestDecision) -> None:
        if d.adopt_epoch:
            log.info("journal %s: updating last promised epoch from %d to %d",
                     self.jid, self.last_promised_epoch, d.epoch)
            self.storage.write_durable_long(LAST_PROMISED_EPOCH, d.epoch)  # durable before reply [I1]
            self.last_promised_epoch = d.epoch
            self._hook("after_promise")
        self.current_ipc_serial = d.ipc_serial
        if d.committed_changed:
            self._committed = (d.committed_txid, d.epoch)
            self.storage.write_best_effort(COMMITTED_TXID, encode_committed(d.committed_txid, d.epoch))

    def _abort_cur(self, why: str) -> None:
        if self._cur is not None:
            log.info("journal %s: aborting open segment %s (%s)", self.jid, self._cur.name, why)
            self._cur = None

    def _load_paxos(self, segment_txid: int) -> PersistedPaxosData | None:
        raw = self.storage.read_paxos(segment_txid)
        if raw is None:
            return None
        where = f"{self.storage.where}/{paxos_name(segment_txid)}"
        try:
            data = PersistedPaxosData.from_bytes(raw, where=where)
        except InvalidRequestError as e:
            raise JournalError(f"journal {self.jid}: {e.message}", jid=self.jid, path=where) from e
        if data.segment_state.start_txid != segment_txid:
            raise JournalError(f"journal {self.jid}: {where} describes segment "
                               f"{data.segment_state}, not {segment_txid}", jid=self.jid, path=where)
        return data

    def _roll_forward_accept(self, segment_txid: int) -> None:
        """Finish or undo a half-done accept-recovery of a segment [I7]."""
        st = self.storage
        paxos = self._load_paxos(segment_txid)
        for name in st.list_files():
            parsed = _parse_tmp_accept_name(name)
            if parsed is None or parsed[0] != segment_txid:
                continue
            if paxos is not None and parsed[1] == paxos.accepted_in_epoch:
                target = segment_file_name(segment_txid)
                log.info("journal %s: rolling forward accepted recovery of segment %d (epoch %d): "
                         "%s -> %s", self.jid, segment_txid, parsed[1], name, target)
                self.index.forget_extent(target)
                st.rename(name, target)
            else:
                log.info("journal %s: deleting %s (its accept-recovery never reached the commit point)",
                         self.jid, name)
                st.delete(name)
            st.sync_dir()

    def _update_highest_after_recovery(self, state: SegmentState) -> None:
        segs = self.index.segments()
        if segs and segs[-1][0] == state.start_txid:
            self.highest_written_txid = state.end_txid
        else:
            self.highest_written_txid = max(self.highest_written_txid, state.end_txid)

    # --- formatting and state ----------------------------------------------------------------

    @one_at_a_time
    def is_formatted(self) -> bool:
        """Whether the journal has a VERSION file."""
        return self.ns_info is not None

    @one_at_a_time
    def has_some_data(self) -> bool:
        """Whether the journal is formatted or holds any file at all."""
        return self.ns_info is not None or bool(self.storage.list_files())

    @one_at_a_time
    def format(self, ns_info: NamespaceInfo, force: bool = False) -> None:
        """Wipe the journal and write VERSION; epochs go back to 0.

        Args:
            ns_info: the namespace to record.
            force: format even if the journal already holds data.

        Raises:
            JournalAlreadyFormattedError: it holds data and ``force`` is False.
            InvalidRequestError: an unusable ``ns_info``.
        """
        if not ns_info.cluster_id or "\n" in ns_info.cluster_id or "=" in ns_info.cluster_id:
            raise InvalidRequestError(f"journal {self.jid}: bad cluster id {ns_info.cluster_id!r}",
                                      jid=self.jid)
        if not force and self.has_some_data():
            raise JournalAlreadyFormattedError(
                f"journal {self.jid}: {self.storage.where} already holds data (formatted for "
                f"namespace {self.ns_info.namespace_id if self.ns_info else '?'}); use force to reformat",
                jid=self.jid)
        log.info("journal %s: formatting %s with %s", self.jid, self.storage.where, ns_info)
        self._format(ns_info, 0, None)

    def _format(self, ns_info: NamespaceInfo, promised_epoch: int, rejoin_txid: int | None) -> None:
        """Wipe, then the rejoin marker and the promise, then VERSION (the commit point: a crash
        before it leaves an unformatted journal, never a formatted voter without its marker)."""
        self._cur = None
        self.index.clear()
        if self.edit_cache is not None:
            self.edit_cache.clear()
        self.storage.wipe()
        if rejoin_txid is not None:
            self.storage.write_durable_long(REJOIN_TXID, rejoin_txid)
        if promised_epoch:
            self.storage.write_durable_long(LAST_PROMISED_EPOCH, promised_epoch)
        self.storage.write_atomic(VERSION_FILE, encode_version(ns_info, "JOURNAL_NODE"))
        self.ns_info = ns_info
        self.rejoin_txid = rejoin_txid
        self.purged_below = 0
        self.last_promised_epoch = promised_epoch
        self.last_writer_epoch = 0
        self._committed = (INVALID_TXID, 0)
        self.current_ipc_serial = -1
        self.highest_written_txid = 0

    @one_at_a_time
    def get_journal_state(self) -> JournalState:
        """The promise (the daemon fills in the HTTP address).

        Raises:
            JournalNotFormattedError
        """
        self._require_formatted()
        return JournalState(self.last_promised_epoch)

    @one_at_a_time
    def check_namespace(self, namespace_id: int, cluster_id: str) -> None:
        """Compare a caller's namespace with the journal's.

        Raises:
            JournalNotFormattedError
            NamespaceMismatchError: naming both values.
        """
        ns = self._require_formatted()
        if namespace_id != ns.namespace_id:
            raise NamespaceMismatchError(
                f"Incompatible namespaceID for journal {self.jid}: NameNode has nsId {namespace_id} but "
                f"storage has nsId {ns.namespace_id}", jid=self.jid)
        if cluster_id != ns.cluster_id:
            raise NamespaceMismatchError(
                f"Incompatible clusterID for journal {self.jid}: NameNode has clusterId {cluster_id!r} "
                f"but storage has clusterId {ns.cluster_id!r}", jid=self.jid)

    @one_at_a_time
    def new_epoch(self, ns_info: NamespaceInfo, epoch: int) -> NewEpochResponse:
        """Promise ``epoch`` (Paxos phase 1 of the writer's election) [jn_rules I5].

        Aborts the open segment and reports the newest segment holding a txn.

        Raises:
            JournalNotFormattedError, NamespaceMismatchError, EpochError
        """
        self.check_namespace(ns_info.namespace_id, ns_info.cluster_id)
        self._refuse_vote_while_rejoining("new_epoch", epoch)
        jn_rules.check_new_epoch(self.jid, self.last_promised_epoch, epoch)
        log.info("journal %s: new epoch %d (last promise %d)", self.jid, epoch, self.last_promised_epoch)
        self.storage.write_durable_long(LAST_PROMISED_EPOCH, epoch)  # durable before reply [I1]
        self.last_promised_epoch = epoch
        self.current_ipc_serial = -1
        self._hook("after_promise")
        self._abort_cur("new epoch")
        return NewEpochResponse(self._scan_storage())

    # --- write path -------------------------------------------------------------------------

    @one_at_a_time
    def start_log_segment(self, req: RequestInfo, txid: int, layout_version: int) -> None:
        """Open ``edits_inprogress_<txid>`` for the writer of ``req.epoch``.

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError, InvalidRequestError
        """
        self._check(req)
        if txid < 1 or not 0 <= layout_version <= 0xFFFFFFFF:
            raise InvalidRequestError(f"journal {self.jid}: bad segment start txid {txid} or layout "
                                      f"version {layout_version}", jid=self.jid, txid=txid)
        if self._cur is not None:
            log.warning("journal %s: client is requesting a new log segment %d though we are already "
                        "writing %s; aborting it (a finalize was probably missed)", self.jid, txid,
                        self._cur.name)
            self._abort_cur("new segment requested")
        name = segment_file_name(txid)
        existing = self.index.state_of(txid)  # also moves an empty one aside [I5]
        if existing is not None:
            if not existing.in_progress:
                raise JournalOutOfSyncError(
                    f"journal {self.jid}: Already have a finalized segment {existing} beginning at "
                    f"txid {txid}", jid=self.jid, txid=txid)
            if existing.num_txns > 1:  # [I6]
                raise JournalOutOfSyncError(
                    f"journal {self.jid}: the log file {name} seems to contain valid transactions "
                    f"({existing}); refusing to start a segment over it", jid=self.jid, txid=txid)
            log.warning("journal %s: overwriting %s which holds one txn (writer crashed after its "
                        "first record)", self.jid, name)
        if self.last_writer_epoch != req.epoch:  # [I2]
            log.info("journal %s: updating last writer epoch from %d to %d", self.jid,
                     self.last_writer_epoch, req.epoch)
            self.storage.write_durable_long(LAST_WRITER_EPOCH, req.epoch)
            self.last_writer_epoch = req.epoch
        # A writer starting this segment proves any earlier recovery of it was aborted.
        self.storage.delete_paxos(txid)
        self.index.forget_extent(name)
        self.storage.create(name, encode_header(layout_version), grows=True)
        self.storage.sync(name)
        self.storage.sync_dir()
        self.index.set_extent(name, Extent(INVALID_TXID, INVALID_TXID, HEADER_SIZE))
        self._cur = _OpenSegment(txid, name, txid, layout_version)

    @one_at_a_time
    def journal(self, req: RequestInfo, segment_txid: int, first_txid: int, num_txns: int,
                records: bytes, *, validated_last_txid: int | None = None) -> None:
        """Append a batch of framed records to the open segment [I3].

        Args:
            req: request header (epoch must be the last writer's).
            segment_txid: the segment the writer thinks it writes.
            first_txid: txid of the first record.
            num_txns: number of records (0: only carries the committed txid).
            records: the framed records (``segment.encode_records``).
            validated_last_txid: the result of ``validate_batch(records, first_txid,
                num_txns, max_record_bytes)`` when the caller already ran it (the
                daemon does, on its event loop, so validating the next batch
                overlaps the fsync of this one); None to validate here.

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError,
            CorruptRecordError (bad batch), JournalError (storage failure).
        """
        if req.jid != self.jid:
            raise InvalidRequestError(f"request for journal {req.jid!r} reached journal {self.jid!r}",
                                      jid=req.jid)
        self._require_formatted()
        self._apply(jn_rules.check_write_request(self.last_promised_epoch, self.current_ipc_serial,
                                                 self.committed_txid, self.last_writer_epoch, req))
        if num_txns == 0:
            if records:
                raise InvalidRequestError(f"journal {self.jid}: a batch of 0 txns carries "
                                          f"{len(records)} bytes", jid=self.jid)
            return
        cur = self._cur
        if cur is None:
            raise JournalOutOfSyncError(f"journal {self.jid}: Can't write txid {first_txid}, no segment "
                                        f"open", jid=self.jid, txid=first_txid)
        if segment_txid != cur.start_txid:
            self._abort_cur("writer out of sync")
            raise JournalOutOfSyncError(
                f"journal {self.jid}: Writer out of sync: it thinks it is writing segment "
                f"{segment_txid} but current segment is {cur.start_txid}",
                jid=self.jid, segment_txid=segment_txid, current_segment_txid=cur.start_txid)
        if first_txid != cur.next_txid:
            raise JournalOutOfSyncError(
                f"journal {self.jid}: Can't write txid {first_txid} expecting nextTxId={cur.next_txid}",
                jid=self.jid, txid=first_txid, next_txid=cur.next_txid)
        if num_txns < 0:
            raise InvalidRequestError(f"journal {self.jid}: negative txn count {num_txns}", jid=self.jid)
        last = validated_last_txid
        if last is None:
            last = validate_batch(records, first_txid, num_txns, self.max_record_bytes)
        elif last != first_txid + num_txns - 1:
            raise InvariantViolation(f"journal {self.jid}: caller validated batch {first_txid}+{num_txns} "
                                     f"as ending at txid {last}")
        if last is None:  # refused: let the reference scanner say exactly why
            last = scan_batch(records, first_txid, num_txns, max_record_bytes=self.max_record_bytes,
                              where=f"journal {self.jid} batch {first_txid}-{first_txid + num_txns - 1}")
        lagging = self.committed_txid != INVALID_TXID and last <= self.committed_txid
        ext = self.index.entry(cur.name)
        try:
            self.storage.append(cur.name, records)
            self._hook("after_append")
            if not lagging:  # HDFS-3885: a batch known committed needs no fsync
                t0 = self._elapsed_clock()
                self.storage.sync(cur.name)
                if t0 is not None:
                    t1 = self._elapsed_clock()
                    self.metrics.record_sync(t1, t1 - t0)
                    if t1 - t0 > self.slow_sync_warn_s:
                        log.warning("journal %s: Sync of transaction range %d-%d took %.0f ms", self.jid,
                                    first_txid, last, (t1 - t0) * 1000)
            self._hook("after_sync")
        except (OSError, JournalError) as e:
            self._fail_segment(cur, ext, e)
            raise JournalError(f"journal {self.jid}: writing txns {first_txid}-{last} to {cur.name} "
                               f"failed: {e}", jid=self.jid, txid=first_txid) from e
        ext.valid_length += len(records)  # [I4]
        if ext.first_txid == INVALID_TXID:
            ext.first_txid = first_txid
        ext.last_txid = last
        cur.next_txid = last + 1
        self.highest_written_txid = last
        if self.edit_cache is not None:  # durable now (HDFS-17710: never before)
            self.edit_cache.store(req.epoch, first_txid, last, records, cur.layout_version)
        m = self.metrics
        m.batches_written += 1
        m.txns_written += num_txns
        m.bytes_written += len(records)
        if lagging:
            m.batches_written_while_lagging += 1
        now = self._now()
        if now is not None:
            m.last_journal_timestamp = now

    def _fail_segment(self, cur: _OpenSegment, ext: _Extent, err: BaseException) -> None:
        """Cut the file back to the acknowledged length and close the segment [I12]."""
        log.error("journal %s: storage failure on %s: %s; closing the segment", self.jid, cur.name, err)
        self._cur = None
        try:
            self.storage.truncate(cur.name, ext.valid_length)
            self.storage.sync(cur.name)
        except (OSError, JournalError) as e2:
            log.error("journal %s: could not cut %s back to %d bytes: %s (forgetting its index)",
                      self.jid, cur.name, ext.valid_length, e2)
            self.index.forget_extent(cur.name)

    @one_at_a_time
    def heartbeat(self, req: RequestInfo) -> None:
        """Only the request gate: fences older writers, records the committed txid.

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError
        """
        self._check(req)

    @one_at_a_time
    def finalize_log_segment(self, req: RequestInfo, start_txid: int, end_txid: int) -> None:
        """Finalize the segment ``start_txid`` at ``end_txid`` (idempotent) [I10].

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError,
            InvariantViolation (already finalized at another end).
        """
        self._check(req)
        if end_txid < start_txid:
            raise InvalidRequestError(f"journal {self.jid}: cannot finalize segment {start_txid} at "
                                      f"end txid {end_txid}", jid=self.jid)
        need_validation = True
        if self._cur is not None and self._cur.start_txid == start_txid:
            cur = self._cur
            self._cur = None
            if cur.next_txid != end_txid + 1:
                raise JournalOutOfSyncError(
                    f"journal {self.jid}: Trying to finalize in-progress log segment {start_txid} to end "
                    f"at txid {end_txid} but only written up to txid {cur.next_txid - 1}",
                    jid=self.jid, start_txid=start_txid, end_txid=end_txid)
            need_validation = False
        fin_name = inprog_name = None
        fin_end = None
        for start, end, name in self.index.segments():
            if start == start_txid:
                if end is None:
                    inprog_name = name
                else:
                    fin_name, fin_end = name, end
        for name in self.storage.list_files():  # an in-progress file hidden by a finalized one
            if name == segment_file_name(start_txid):
                inprog_name = name
        if fin_name is not None:
            if fin_end != end_txid:
                raise InvariantViolation(
                    f"journal {self.jid}: Trying to re-finalize already finalized log {fin_name} with "
                    f"different endTxId {end_txid}")
            if inprog_name is not None:  # a crash left both: the finalized one is the decision
                self.index.forget_extent(inprog_name)
                self.storage.delete(inprog_name)
                self.storage.sync_dir()
        elif inprog_name is None:
            raise JournalOutOfSyncError(f"journal {self.jid}: No log file to finalize at transaction ID "
                                        f"{start_txid}", jid=self.jid, start_txid=start_txid)
        else:
            ext = self.index.extent(inprog_name)
            on_disk = ext.last_txid if ext is not None else start_txid - 1
            if need_validation and on_disk != end_txid:
                raise JournalOutOfSyncError(
                    f"journal {self.jid}: Trying to finalize in-progress log segment {start_txid} to end "
                    f"at txid {end_txid} but log {inprog_name} on disk only contains up to txid {on_disk}",
                    jid=self.jid, start_txid=start_txid, end_txid=end_txid)
            if ext is None:
                raise JournalOutOfSyncError(f"journal {self.jid}: No log file to finalize at transaction "
                                            f"ID {start_txid}", jid=self.jid, start_txid=start_txid)
            if need_validation:
                self._check_copy_is_writers(req, start_txid, end_txid, inprog_name)
            if self.storage.size(inprog_name) > ext.valid_length:
                # Bytes past the agreed end are never data; a finalized file ends cleanly.
                self.storage.truncate(inprog_name, ext.valid_length)
            # The content must be durable before the rename makes it final: batches known
            # committed were appended without fsync (HDFS-3885) [I3, I10].
            self.storage.sync(inprog_name)
            self._hook("before_finalize_rename")
            self.index.forget_extent(inprog_name)
            self.storage.rename(inprog_name, segment_file_name(start_txid, end_txid))
            self._hook("after_finalize_rename")
            self.storage.sync_dir()
        # A finalized segment is a decided value; its paxos data is no longer needed.
        self.storage.delete_paxos(start_txid)

    def _check_copy_is_writers(self, req: RequestInfo, start_txid: int, end_txid: int, name: str) -> None:
        """Refuse to finalize an in-progress copy the requesting writer neither wrote nor accepted [I10].

        A recovery finalize reaches every node, also one whose accept-recovery
        failed or never arrived; its copy may have the right end txid but another
        writer's records. The copy may be finalized only if this epoch accepted it
        (paxos data of ``req.epoch`` with that end) or wrote it (it is the newest
        segment and ``req.epoch`` is the last writer epoch: a normal roll after this
        node restarted).

        Raises:
            JournalOutOfSyncError
        """
        paxos = self._load_paxos(start_txid)
        if paxos is not None and paxos.accepted_in_epoch == req.epoch and \
                paxos.segment_state.end_txid == end_txid:
            return
        segs = self.index.segments()
        if segs and segs[-1][0] == start_txid and self.last_writer_epoch == req.epoch:
            return
        raise JournalOutOfSyncError(
            f"journal {self.jid}: not finalizing {name} at txid {end_txid}: epoch {req.epoch} neither wrote "
            f"it (last writer epoch {self.last_writer_epoch}) nor accepted it in recovery "
            f"(paxos data: {paxos.segment_state if paxos else None} in epoch "
            f"{paxos.accepted_in_epoch if paxos else None})",
            jid=self.jid, start_txid=start_txid, end_txid=end_txid)

    @one_at_a_time
    def purge_logs_older_than(self, req: RequestInfo, min_txid_to_keep: int) -> list[str]:
        """Delete segments wholly below ``min_txid_to_keep`` and their paxos files.

        Returns:
            The names deleted (sorted).

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError
        """
        self._check(req)
        if min_txid_to_keep > self.purged_below:  # durable first: the syncer must never re-fetch below it
            self.storage.write_durable_long(PURGED_BELOW, min_txid_to_keep)
            self.purged_below = min_txid_to_keep
        segs = self.index.segments()
        newest = segs[-1][0] if segs else None
        deleted: list[str] = []
        cur_name = self._cur.name if self._cur is not None else None
        for name in self.storage.list_files():
            base = name
            for suffix in (".empty", ".corrupt", ".stale", ".trash"):
                if name.endswith(suffix):
                    base = name[: -len(suffix)]
            parsed = parse_segment_file_name(base)
            tmp = _parse_tmp_accept_name(name)
            if parsed is not None and base != name:      # moved aside: never data
                doomed = parsed.start_txid < min_txid_to_keep
            elif parsed is not None and parsed.end_txid is not None:
                doomed = parsed.end_txid < min_txid_to_keep
            elif parsed is not None:                     # in progress: keep the newest one
                doomed = (parsed.start_txid < min_txid_to_keep and parsed.start_txid != newest
                          and name != cur_name)
            elif tmp is not None:
                doomed = tmp[0] < min_txid_to_keep and tmp[0] != newest
            else:
                continue
            if doomed:
                self.index.forget(name)
                self.storage.delete(name)
                deleted.append(name)
        for name in self.storage.list_files(PAXOS_DIR):
            if name.isdigit() and int(name) < min_txid_to_keep:
                self.storage.delete(f"{PAXOS_DIR}/{name}")
                deleted.append(f"{PAXOS_DIR}/{name}")
        if deleted:
            self.storage.sync_dir()
            self.storage.sync_dir(PAXOS_DIR)
            log.info("journal %s: purged %d files below txid %d", self.jid, len(deleted), min_txid_to_keep)
        return deleted

    # --- read path ----------------------------------------------------------------------------

    @one_at_a_time
    def get_edit_log_manifest(self, since_txid: int, in_progress_ok: bool,
                              with_digests: bool = False) -> Manifest:
        """Segments holding txids >= ``since_txid``, sorted, the committed txid and the
        last writer epoch (a reader takes in-progress copies from the newest writer's nodes).

        Only the newest segment may be listed in progress (when ``in_progress_ok``),
        with its end at the highest acknowledged txid; an older in-progress file
        (left by a missed finalize) is stale and never advertised. With ``with_digests``
        (the syncer of a peer asks), each finalized segment carries the CRC32C of its
        record bytes (computed once per file and cached against the file's stamp).

        Raises:
            JournalNotFormattedError
        """
        self._require_formatted()
        segs = self.index.segments()
        out: list[SegmentState] = []
        for i, (start, end, name) in enumerate(segs):
            if end is None:
                if not in_progress_ok or i != len(segs) - 1:
                    continue
                ext = self.index.extent(name)
                if ext is None:
                    continue
                end_txid, ip = ext.last_txid, True
            else:
                end_txid, ip = end, False
            if start >= since_txid or start <= since_txid <= end_txid:
                digest = self.index.check_finalized(name)[0] if with_digests and not ip else None
                out.append(SegmentState(start, end_txid, ip, digest))
        committed_txid, committed_epoch = self._committed
        return Manifest(tuple(out), committed_txid, self.last_writer_epoch,
                        committed_epoch if committed_txid != INVALID_TXID else None)

    def get_journaled_edits(self, since_txid: int, max_txns: int, max_bytes: int) -> JournaledEdits:
        """Committed edits from ``since_txid`` out of the edit cache (HDFS-13150).

        Never returns a txid above the committed txid this node knows, and only edits
        of the writer that reported it (``edit_cache.py`` says why that is safe).

        One of the two calls that may run on another thread than the journal's [I13] (the daemon runs it
        on its event loop, so a tailer never waits behind the fsyncs of later batches): it
        reads the committed (txid, epoch) pair as one tuple and the cache under its lock.

        Raises:
            JournalNotFormattedError
            CacheMissError: the cache is disabled, or cannot serve ``since_txid`` (the
                reader streams the segments instead).
            InvalidRequestError: ``since_txid`` < 1 or ``max_txns`` < 1.
        """
        self._require_formatted()
        if since_txid < 1 or max_txns < 1:
            raise InvalidRequestError(f"journal {self.jid}: get_journaled_edits since txid {since_txid} "
                                      f"for {max_txns} txns", jid=self.jid, txid=since_txid)
        if self.edit_cache is None:
            raise CacheMissError(f"journal {self.jid}: the edit cache is disabled on this JournalNode "
                                 f"(dfs.journalnode.edit-cache-size.bytes is 0)", jid=self.jid,
                                 since_txid=since_txid, lowest_txid=INVALID_TXID)
        committed_txid, committed_epoch = self._committed
        got = self.edit_cache.retrieve(since_txid, max_txns, max_bytes, committed_txid, committed_epoch)
        return JournaledEdits(got.first_txid, got.num_txns, got.records, got.layout_version,
                              committed_txid, got.writer_epoch)

    @one_at_a_time
    def open_segment_for_read(self, segment_txid: int, in_progress_ok: bool) -> ReadableSegment:
        """Open the segment starting at ``segment_txid`` for ``/getJournal``.

        An in-progress segment is served up to its acknowledged valid length.

        Raises:
            JournalNotFormattedError
            SegmentNotFoundError: "No edit log found starting at txid N".
        """
        self._require_formatted()
        for start, end, name in self.index.segments():
            if start != segment_txid:
                continue
            if end is not None:
                f = self.storage.open_read(name)
                return ReadableSegment(name, self.storage.size(name), False, f)
            if in_progress_ok:
                ext = self.index.extent(name)
                if ext is not None:
                    return ReadableSegment(name, ext.valid_length, True, self.storage.open_read(name))
        raise SegmentNotFoundError(f"journal {self.jid}: No edit log found starting at txid {segment_txid}",
                                   jid=self.jid, txid=segment_txid)

    # --- recovery path ---------------------------------------------------------------------

    @one_at_a_time
    def prepare_recovery(self, req: RequestInfo, segment_txid: int) -> PrepareRecoveryResponse:
        """Paxos phase 1b for the segment ``segment_txid``.

        Returns the accepted value (with its epoch) if this node accepted one
        and the segment is not finalized, otherwise the on-disk state.

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError,
            InvariantViolation (on-disk segment differs from the accepted value).
        """
        self._check(req)
        self._refuse_vote_while_rejoining("prepare_recovery", req.epoch)
        self._abort_cur("prepare recovery")
        self._roll_forward_accept(segment_txid)  # [I7]
        paxos = self._load_paxos(segment_txid)
        state = self.index.state_of(segment_txid)
        committed = None if self.committed_txid == INVALID_TXID else self.committed_txid
        if paxos is not None and (state is None or state.in_progress):
            if state is None or state.end_txid != paxos.segment_state.end_txid:
                raise InvariantViolation(
                    f"journal {self.jid}: paxos data says segment {paxos.segment_state} was accepted in "
                    f"epoch {paxos.accepted_in_epoch}, but the on-disk segment is {state}")
            return PrepareRecoveryResponse(paxos.segment_state, paxos.accepted_in_epoch,
                                           self.last_writer_epoch, committed)
        if state is not None:
            state = dataclasses.replace(state, digest=self.index.digest(state))
        return PrepareRecoveryResponse(state, None, self.last_writer_epoch, committed)

    @one_at_a_time
    def accept_recovery_plan(self, req: RequestInfo, segment_state: SegmentState) -> AcceptRecoveryPlan:
        """Checks of Paxos phase 2 before any download [I8, I9].

        Raises:
            EpochError, JournalOutOfSyncError, JournalNotFormattedError,
            InvalidRequestError (bad recovery state), InvariantViolation.
        """
        # [I9]: only a committed txid reported by an *older* writer describes the history
        # being recovered; one reported in this epoch lies in a newer segment (a late accept).
        older_committed = self.committed_txid if self.committed_epoch < req.epoch else INVALID_TXID
        self._check(req)
        self._abort_cur("accept recovery")
        s = segment_state
        if s.end_txid <= 0 or s.end_txid < s.start_txid or s.start_txid <= 0:
            raise InvalidRequestError(f"journal {self.jid}: bad recovery state for segment {s}",
                                      jid=self.jid)
        self._roll_forward_accept(s.start_txid)
        old = self._load_paxos(s.start_txid)
        if old is not None and old.accepted_in_epoch > req.epoch:
            raise InvariantViolation(
                f"journal {self.jid}: Bad paxos transition, out-of-order epochs: segment {s} in epoch "
                f"{req.epoch} after {old.segment_state} was accepted in epoch {old.accepted_in_epoch}")
        current = self.index.state_of(s.start_txid)
        download = False
        if current is None:
            download = True
        elif current.end_txid != s.end_txid:
            c = older_committed
            if c != INVALID_TXID and current.start_txid <= c <= current.end_txid and \
                    not s.start_txid <= c <= s.end_txid:
                raise InvariantViolation(
                    f"journal {self.jid}: cannot replace segment {current} with {s}: would discard "
                    f"already-committed txn {c}")
            if not current.in_progress:
                raise InvariantViolation(
                    f"journal {self.jid}: Should never be asked to synchronize a different log {s} on top "
                    f"of an already-finalized segment {current}")
            download = True
        elif s.digest is not None and self.index.digest(current) != s.digest:
            # Same length, other records (another writer's copy): replace it [I9].
            if not current.in_progress:
                raise InvariantViolation(
                    f"journal {self.jid}: finalized segment {current} has other contents than the value "
                    f"{s} to accept (digest {self.index.digest(current):08x})")
            log.info("journal %s: accept recovery of %s: our copy has the same length but other "
                     "contents; downloading", self.jid, s)
            download = True
        else:
            log.info("journal %s: accept recovery of %s: already have the same %s, no download",
                     self.jid, s, "length" if s.digest is None else "contents")
        return AcceptRecoveryPlan(s, req.epoch, download, _tmp_accept_name(s.start_txid, req.epoch))

    # --- downloads (accept-recovery, the syncer): written by the daemon chunk by chunk -----

    def _check_download_name(self, tmp_name: str) -> None:
        if not _is_download_name(tmp_name):
            raise InvalidRequestError(f"journal {self.jid}: {tmp_name!r} is not a download's tmp file",
                                      jid=self.jid)

    @one_at_a_time
    def begin_download(self, tmp_name: str) -> None:
        """Create (or empty) the tmp file a download is written to: ``plan.tmp_name`` of
        accept-recovery, or ``sync_installer.synced_tmp_name`` of the syncer. Nothing is durable until the
        commit (``accept_recovery_commit``, ``install_synced_segment``) syncs it; a crash leaves a
        tmp file that opening deletes [I7].

        Raises:
            InvalidRequestError: not a download's tmp name. OSError: storage.
        """
        self._check_download_name(tmp_name)
        self.storage.create(tmp_name, b"")

    @one_at_a_time
    def append_download(self, tmp_name: str, chunk: bytes) -> None:
        """Append the next chunk of a download to its tmp file.

        Raises:
            InvalidRequestError: not a download's tmp name.
            OSError: storage; FileNotFoundError when the tmp file is gone (a later recovery of the
                segment deleted it [I7]: the download is stale).
        """
        self._check_download_name(tmp_name)
        self.storage.append(tmp_name, chunk)

    @one_at_a_time
    def discard_download(self, tmp_name: str) -> None:
        """Delete a failed download's tmp file (idempotent; a crash before the delete is durable
        leaves it to opening)."""
        self._check_download_name(tmp_name)
        self.storage.delete(tmp_name)

    @one_at_a_time
    def accept_recovery_commit(self, plan: AcceptRecoveryPlan) -> None:
        """Paxos phase 2b: check the downloaded segment, persist the paxos data (the commit
        point), then move the segment into place [I7].

        Args:
            plan: from :meth:`accept_recovery_plan`. When ``plan.download``, the daemon has written
                the download to ``plan.tmp_name`` (``begin_download``, ``append_download``; its
                transport checksum verified); it is scanned here in chunks, cut to the agreed
                txids, and deleted if refused.

        Raises:
            EpochError: a newer epoch was promised while downloading.
            JournalError: no downloaded copy, or it does not hold the agreed txids.
        """
        s = plan.segment_state
        st = self.storage
        if self.last_promised_epoch > plan.epoch:
            if plan.download:
                st.delete(plan.tmp_name)
            raise EpochError(
                f"journal {self.jid}: IPC's epoch {plan.epoch} is less than the last promised epoch "
                f"{self.last_promised_epoch} (promised while accept-recovery of {s} was downloading)",
                jid=self.jid, epoch=plan.epoch, last_promised_epoch=self.last_promised_epoch)
        target = segment_file_name(s.start_txid)
        ext = None
        if plan.download:
            if not st.exists(plan.tmp_name):
                raise JournalError(f"journal {self.jid}: accept recovery of {s}: no downloaded copy in "
                                   f"{plan.tmp_name}", jid=self.jid, txid=s.start_txid)
            try:
                res, digest = scan_segment_chunks(self.index.read_chunks(plan.tmp_name),
                                                  expected_first_txid=s.start_txid,
                                                  stop_after_txid=s.end_txid,
                                                  max_record_bytes=self.max_record_bytes,
                                                  where=f"{st.where}/{plan.tmp_name}")
                if not res.header_ok or res.first_txid != s.start_txid or res.last_txid != s.end_txid:
                    st.delete(plan.tmp_name)
                    raise JournalError(
                        f"journal {self.jid}: downloaded segment for {s} holds txids "
                        f"{res.first_txid}-{res.last_txid} (header {'ok' if res.header_ok else 'bad'}), "
                        f"expected {s.start_txid}-{s.end_txid}", jid=self.jid, txid=s.start_txid)
                if s.digest is not None and digest != s.digest:
                    st.delete(plan.tmp_name)
                    raise JournalError(
                        f"journal {self.jid}: downloaded segment for {s} has digest {digest:08x}, expected "
                        f"{s.digest:08x}", jid=self.jid, txid=s.start_txid)
                if st.size(plan.tmp_name) > res.valid_length:
                    st.truncate(plan.tmp_name, res.valid_length)  # only the agreed txids
                st.sync(plan.tmp_name)
                st.sync_dir()  # the tmp entry must be durable before the commit point [I7]
            except OSError as e:
                st.delete(plan.tmp_name)
                raise JournalError(f"journal {self.jid}: storing the downloaded segment {s} in "
                                   f"{plan.tmp_name} failed: {e}", jid=self.jid) from e
            self._hook("after_download_tmp")
            ext = Extent(s.start_txid, s.end_txid, res.valid_length)
        else:
            # The kept copy becomes the accepted value: its bytes must be durable before the
            # decision is (batches known committed were appended without fsync) [I3, I7].
            for start, _end, name in self.index.segments():
                if start == s.start_txid:
                    self.storage.sync(name)
        self._hook("before_persist_paxos")
        self.storage.write_paxos(s.start_txid, PersistedPaxosData(s, plan.epoch).to_bytes())  # COMMIT
        self._hook("after_persist_paxos")
        if plan.download:
            self.index.forget_extent(target)
            self.storage.rename(plan.tmp_name, target)
            self._hook("after_accept_rename")
            self.storage.sync_dir()
            self.index.set_extent(target, ext)  # type: ignore[arg-type]
        self._update_highest_after_recovery(s)
        log.info("journal %s: accepted recovery of segment %s in epoch %d", self.jid, s, plan.epoch)

    # --- the vote of a node formatted from its peers (its sync calls: sync_installer.py) ----

    def _refuse_vote_while_rejoining(self, call: str, epoch: int) -> None:
        """A node formatted from its peers takes no part in elections and recoveries until it
        holds again every txid it may have lost (sync_rules.rejoin_complete)."""
        if self.rejoin_txid is not None:
            raise JournalRejoiningError(
                f"journal {self.jid}: {call} in epoch {epoch} refused: this node was formatted from its "
                f"peers and must hold every finalized txid through {self.rejoin_txid} again before it may "
                f"vote (the syncer is copying them)", jid=self.jid, epoch=epoch, txid=self.rejoin_txid)

    # --- lifecycle / status ----------------------------------------------------------------

    @one_at_a_time
    def close(self) -> None:
        """Release the storage. Idempotent."""
        if not self._closed:
            self._closed = True
            self._cur = None
            self.storage.close()

    @one_at_a_time
    def status(self) -> dict:
        """A snapshot for the status page and ``/jmx``."""
        segs = self.index.segments()
        return {
            "jid": self.jid,
            "formatted": self.is_formatted(),
            "namespace_id": self.ns_info.namespace_id if self.ns_info else None,
            "cluster_id": self.ns_info.cluster_id if self.ns_info else None,
            "last_promised_epoch": self.last_promised_epoch,
            "last_writer_epoch": self.last_writer_epoch,
            "committed_txid": self.committed_txid,
            "highest_written_txid": self.highest_written_txid,
            "open_segment": self._cur.start_txid if self._cur else None,
            "purged_below": self.purged_below,
            "rejoin_txid": self.rejoin_txid,
            "segments": [[s, e, e is None] for s, e, _ in segs],
        }

    @one_at_a_time
    def metrics_snapshot(self) -> dict:
        """The ``Journal-<jid>`` bean (Hadoop metric names)."""
        out = self.metrics.snapshot(last_writer_epoch=self.last_writer_epoch,
                                    last_promised_epoch=self.last_promised_epoch,
                                    last_written_txid=self.highest_written_txid,
                                    committed_txid=self.committed_txid, now_s=self._elapsed_clock())
        c = self.edit_cache
        if c is not None:
            out.update(c.metrics())
        return out


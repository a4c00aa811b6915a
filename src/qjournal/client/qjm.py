"""QuorumJournalManager: a JournalManager stored on a quorum of JournalNodes (HDFS-3077).

Why: the NameNode's shared edit log must survive the loss of any minority of
machines, with fencing built in, so that two NameNodes that both believe they
are active can never both commit (seed 000 §1.3). This class is the writer's
and the reader's side of that protocol, behind the generic
:class:`~qjournal.journalmanager.base.JournalManager` interface so the NameNode never knows
which storage it writes to.

Theory of operation (seed 000 §2, reference §4.1):

1. **Fence.** ``recover_unfinalized_segments`` asks a quorum for
   ``last_promised_epoch``, proposes one more than the largest
   (:func:`qjournal.protocol.recovery.next_epoch`) and has a quorum promise it
   with ``new_epoch``. From then on no writer with a lower epoch can get a
   quorum to accept anything.
2. **Recover.** The newest segment reported by the new-epoch quorum may be
   unfinalized. Paxos over that segment: ``prepare_recovery`` on a quorum,
   choose the source (:func:`qjournal.protocol.recovery.choose_recovery_source`,
   every equally good source kept), ``accept_recovery`` on a quorum (each
   JournalNode downloads from the source URL if its copy differs; on a failed
   download the client retries the accept with the next tied source),
   ``finalize_log_segment`` on a quorum. An empty segment counts as absent
   (seed 000 §2.10.5) and needs no recovery.
3. **Write.** ``start_log_segment`` on a quorum, then a
   :class:`~qjournal.client.output_stream.QuorumOutputStream` whose ``sync``
   returns when a quorum fsynced the batch; ``finalize_log_segment`` on a
   quorum ends the segment. Any failed quorum write stops this writer for good
   (it may have been fenced): every later write raises the stored error.
4. **Read.** ``get_manifest`` merges the manifests of a quorum
   (:mod:`qjournal.client.reader`); ``open_segment`` streams a segment over HTTP
   from a replica, failing over to other replicas that are at least as long.
   A tailer of the in-progress segment (``open_input`` with ``in_progress_ok``,
   ``dfs.ha.tail-edits.in-progress``) first asks every node's edit cache
   (``get_journaled_edits``) and takes the committed edits a majority holds
   (:mod:`qjournal.client.rpc_reader`); when a majority cannot serve the txid
   from memory it falls back to streaming the segments.

Invariants (the correctness requirements of seed 000 §1.3.2 rest on them):

1. No call that changes a JournalNode's log is sent before this writer holds
   an epoch promised by a quorum.
2. No segment is started before the newest segment was recovered and
   finalized on a quorum (seed 000 §2.7 invariant 2).
3. ``sync`` succeeds only when a quorum acknowledged every txid of the batch;
   the committed txid only grows.
4. After a failed write, the writer sends nothing more that could change the
   log (it must be recreated and recover again).
5. Recovery never finalizes a segment shorter than a txid some responder saw
   committed (checked, :class:`InvariantViolation`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import aiohttp

from qjournal.client.logger import AsyncLogger, Connector
from qjournal.client.logger_set import AsyncLoggerSet
from qjournal.client.output_stream import QuorumOutputStream
from qjournal.client.quorum_call import QuorumCall
from qjournal.client.reader import (Fetcher, MergedManifest, QuorumSegmentInputStream,
                                    merge_manifests)
from qjournal.client.rpc_reader import ChosenEdits, RpcEditLogInputStream, choose_journaled_edits
from qjournal.client.settings import QJMSettings
from qjournal.errors import (CacheMissError, EpochError, InvariantViolation, JournalError,
                             JournalNotFormattedError, QJournalError, QuorumError, TransportError)
from qjournal.journalmanager.base import JournalManager
from qjournal.journalmanager.streams import EditLogInputStream, SegmentInfo
from qjournal.protocol import recovery
from qjournal.protocol.journal_uri import parse_qjournal_uri
from qjournal.protocol.messages import (JournalState, Manifest, NamespaceInfo, NewEpochResponse,
                                        SegmentState)
from qjournal.protocol.segment import LAYOUT_VERSION
from qjournal.transport import RpcClient
from qjournal.transport.download import SegmentDownload, http_download
from qjournal.transport.tls import client_context_from_conf
from qjournal.transport.http import http_client_context
from qjournal.protocol.protocols import QJOURNAL

log = logging.getLogger(__name__)

__all__ = ["NodeStatus", "QuorumJournalManager", "parse_qjournal_uri"]


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One JournalNode's answers, for ``qjournal log status``.

    Attributes:
        node: the node's address as written in the URI.
        state: its journal state, None when it did not answer.
        manifest: its manifest (in-progress segments included), None when it did not answer.
        error: why it did not answer (``Type: message``), None when it did.
    """

    node: str
    state: JournalState | None = None
    manifest: Manifest | None = None
    error: str | None = None

    @property
    def answered(self) -> bool:
        """Whether the node answered ``get_journal_state``."""
        return self.state is not None


@dataclass
class _AcceptWindow:
    """Open while the accept-recovery quorum is undecided: a retry with the next tied
    source starts only while it is open."""

    open: bool = True


class QuorumJournalManager(JournalManager):
    """The quorum journal client.

    Args:
        uri: ``qjournal://h1:p1;h2:p2;h3:p3/<jid>``.
        conf: a :class:`qjournal.config.Configuration` (or None for defaults).
        ns_info: the namespace this writer belongs to; learnt from the
            JournalNodes when None.
        network: a :class:`qjournal.transport.MemoryNetwork`; node addresses are
            then memory addresses (``host:port`` as written in the URI).
        settings: explicit settings (tests); default read from ``conf``.
        connector_factory: ``address -> connector`` overriding the transport
            (fault-injection tests).
        client_name: this client's node name on a memory network.
        ssl: client TLS context for RPC (default: from the ``qjournal.rpc.tls.*`` keys of ``conf``).
        segment_fetcher: downloads a node's copy of a segment for readers (the simulator's
            HTTP); default: ``/getJournal`` over HTTP(S), or through ``network`` for the
            ``mem://`` URLs of in-process JournalNodes without HTTP.
    """

    def __init__(self, uri: str, conf: Any = None, ns_info: NamespaceInfo | None = None,
                 network: Any = None, *, settings: QJMSettings | None = None,
                 connector_factory: Callable[[str], Connector] | None = None,
                 client_name: str = "qjm", ssl: Any = None,
                 segment_fetcher: Fetcher | None = None) -> None:
        self.uri = uri
        self.required = True
        addrs, self.jid = parse_qjournal_uri(uri)
        if len(addrs) % 2 == 0:
            log.warning("journal URI %s lists an even number (%d) of JournalNodes; this adds no "
                        "failure tolerance over %d. This is not recommended!", uri, len(addrs),
                        len(addrs) - 1)
        self.settings = settings or QJMSettings.from_conf(conf)
        self.ns_info = ns_info
        self._network = network
        if ssl is None and network is None and conf is not None and hasattr(conf, "get_bool"):
            # Mutual TLS on RPC when qjournal.rpc.tls.enabled (the JournalNodes then require it).
            ssl = client_context_from_conf(conf)
        self._ssl = ssl
        self._conf = conf  # for the HTTPS client context of segment downloads (dfs.http.policy)
        self._client_name = client_name
        self._segment_fetcher = segment_fetcher
        loggers = []
        for host, port in addrs:
            name = f"{host}:{port}"
            if connector_factory is not None:
                connector = connector_factory(name)
            else:
                connector = self._default_connector(host, port)
            loggers.append(AsyncLogger(name, self.jid, connector, self.settings))
        self.loggers = AsyncLoggerSet(loggers)
        self.epoch: int | None = None
        self._is_active_writer = False
        self._failed: BaseException | None = None
        self._stream: QuorumOutputStream | None = None
        self._http: Any = None
        self._last_manifest: MergedManifest | None = None
        self.committed_txid: int | None = None
        self._bg: set[asyncio.Task] = set()
        self._reads_opened = 0
        #: RPC tailing counters: rounds answered from the edit caches, rounds that fell back to streaming
        self.rpc_reads = 0
        self.rpc_fallbacks = 0
        self.last_rpc_miss = ""
        #: bytes this reader moved: edit-cache answers (every node's), segment downloads
        self.bytes_rpc = 0
        self.bytes_streamed = 0

    @classmethod
    def from_uri(cls, uri: str, conf: Any = None) -> "QuorumJournalManager":
        """Registry entry point (``qjournal.journals`` group)."""
        return cls(uri, conf)

    def _default_connector(self, host: str, port: int) -> Connector:
        s = self.settings
        if self._network is not None:
            network, address, src = self._network, f"{host}:{port}", self._client_name

            async def connect_memory() -> Any:
                return await RpcClient.connect_memory(network, address, src=src,
                                                      connect_timeout_ms=s.connect_timeout_ms,
                                                      max_frame_bytes=s.max_frame_bytes)
            return connect_memory
        ssl = self._ssl

        async def connect_tcp() -> Any:
            return await RpcClient.connect_tcp(host, port, connect_timeout_ms=s.connect_timeout_ms,
                                               ssl=ssl, max_frame_bytes=s.max_frame_bytes)
        return connect_tcp

    def __repr__(self) -> str:
        return f"QJM to [{', '.join(lg.name for lg in self.loggers.loggers)}]"

    # -- writer state --------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._failed is not None:
            e = self._failed
            cls = type(e) if isinstance(e, QJournalError) else JournalError
            raise cls(f"journal {self.jid!r}: this writer (epoch {self.epoch}) stopped after an "
                      f"earlier failure and takes no more writes: {e}", jid=self.jid)
        if not self._is_active_writer:
            raise JournalError(f"journal {self.jid!r}: not the writer: call "
                               f"recover_unfinalized_segments() first", jid=self.jid)

    def _on_write_failure(self, e: BaseException) -> None:
        if self._failed is None:
            self._failed = e
            log.error("journal %r: writer with epoch %s stops: %s", self.jid, self.epoch, e)

    def _on_synced(self, txid: int) -> None:
        self.committed_txid = txid

    def _on_stream_closed(self, stream: QuorumOutputStream) -> None:
        if self._stream is stream:
            self._stream = None

    async def _writer_quorum(self, call: QuorumCall, timeout_ms: int) -> dict[str, Any]:
        """Wait for a write-path quorum; a failure stops the writer (invariant 4)."""
        try:
            return await self.loggers.wait_for_quorum(call, timeout_ms)
        except BaseException as e:
            self._on_write_failure(e)
            raise

    # -- format / state --------------------------------------------------------------------
    async def format(self, ns_info: NamespaceInfo, force: bool = False) -> None:
        """Format the journal on **every** JournalNode.

        Raises:
            QuorumError: any node failed (each node's error listed), e.g.
                JournalAlreadyFormattedError without ``force``.
            RpcTimeoutError: not every node answered in ``dfs.qjm.operations.timeout``.
        """
        call = self.loggers.fan_out(QJOURNAL.format, lambda lg: lg.format(ns_info, force))
        await self.loggers.wait_for_all(call, self.settings.operations_timeout_ms)
        self.ns_info = ns_info

    async def is_formatted(self) -> bool:
        """True when a majority of JournalNodes is formatted.

        Raises:
            QuorumError: not enough nodes answered to decide.
        """
        def ask(lg: AsyncLogger) -> Any:
            return _require_true(lg.is_formatted(), lg.name, self.jid)

        call = self.loggers.fan_out(QJOURNAL.is_formatted, ask)
        try:
            await self.loggers.wait_for_quorum(call, self.settings.operations_timeout_ms)
            return True
        except QuorumError:
            unformatted = sum(1 for e in call.errors.values()
                              if isinstance(e, JournalNotFormattedError))
            if unformatted > len(self.loggers) - self.loggers.majority:
                return False
            raise

    async def has_some_data(self) -> bool:
        """True when any JournalNode is formatted; every node must answer.

        Raises:
            QuorumError / RpcTimeoutError: some node did not answer.
        """
        call = self.loggers.fan_out(QJOURNAL.is_formatted, lambda lg: lg.is_formatted())
        res = await self.loggers.wait_for_all(call, self.settings.operations_timeout_ms)
        return any(bool(v) for _, v in sorted(res.items()))

    async def get_journal_states(self) -> dict[str, JournalState]:
        """``get_journal_state`` of a quorum (node -> its state)."""
        call = self.loggers.fan_out(QJOURNAL.get_journal_state, lambda lg: lg.get_journal_state())
        return await self.loggers.wait_for_quorum(call, self.settings.get_journal_state_timeout_ms)

    # -- becoming the writer ----------------------------------------------------------------
    async def _create_new_unique_epoch(self) -> dict[str, NewEpochResponse]:
        if self.epoch is not None:
            raise InvariantViolation(f"journal {self.jid!r}: epoch already established ({self.epoch})")
        states = await self.get_journal_states()
        if self.ns_info is None:
            self.ns_info = _ns_info_from_states(states, self.jid)
        promised = [states[n].last_promised_epoch for n in sorted(states)]
        epoch = recovery.next_epoch(promised)
        ns_info = self.ns_info
        call = self.loggers.fan_out(QJOURNAL.new_epoch, lambda lg: lg.new_epoch(ns_info, epoch))
        try:
            res = await self.loggers.wait_for_quorum(call, self.settings.new_epoch_timeout_ms)
        except QJournalError as e:
            fields = {**e.fields, "jid": self.jid, "epoch": epoch}
            raise type(e)(f"journal {self.jid!r}: could not get a quorum to promise epoch {epoch} "
                          f"(another writer may be starting): {e}", **fields) from e
        self.loggers.set_epoch(epoch)
        self.epoch = epoch
        log.info("journal %r: successfully started new epoch %d", self.jid, epoch)
        return dict(sorted(res.items()))

    async def recover_unfinalized_segments(self) -> None:
        """Fence older writers with a new epoch and recover the newest segment.

        Raises:
            JournalError: this object already is (or was) the writer.
            QuorumError / FencedError / RpcTimeoutError: no quorum for a step; the
                message names the step, the epoch and every node's error.
            InvariantViolation: recovery would lose a committed txid.
        """
        if self._is_active_writer or self.epoch is not None:
            raise JournalError(f"journal {self.jid!r}: recover_unfinalized_segments called twice "
                               f"(epoch {self.epoch}); create a new QuorumJournalManager",
                               jid=self.jid)
        log.info("journal %r: starting recovery process for unclosed journal segments", self.jid)
        resps = await self._create_new_unique_epoch()
        seg = recovery.segment_to_recover(r.last_segment_txid for _, r in sorted(resps.items()))
        if seg is not None:
            log.info("journal %r: newest segment starts at txid %d; recovering it", self.jid, seg)
            await self._recover_unclosed_segment(seg)
        self._is_active_writer = True

    async def _recover_unclosed_segment(self, segment_txid: int) -> None:
        s = self.settings
        call = self.loggers.fan_out(QJOURNAL.prepare_recovery, lambda lg: lg.prepare_recovery(segment_txid))
        answers = await self._writer_quorum(call, s.prepare_recovery_timeout_ms)
        resps = dict(sorted(answers.items()))
        decision = recovery.choose_recovery_source(segment_txid, resps)
        if decision.state is None:
            log.info("journal %r: no responder has segment %d; nothing to recover", self.jid,
                     segment_txid)
            recovery.check_committed_not_lost(decision, resps)
            return
        log.info("journal %r: recovery of segment %d: %s %s from %s", self.jid, segment_txid,
                 decision.reason, decision.state, list(decision.sources))
        recovery.check_committed_not_lost(decision, resps)
        urls = await self._source_urls(decision.sources, segment_txid)
        state = decision.state
        window = _AcceptWindow()
        call = self.loggers.fan_out(
            QJOURNAL.accept_recovery, lambda lg: self._accept_with_fallback(lg, state, urls, window))
        try:
            await self._writer_quorum(call, s.accept_recovery_timeout_ms)
        finally:
            # No retry may be queued once the quorum is decided: it would reach the node
            # after the finalize and the next segment's calls (a "late accept").
            window.open = False
        end = decision.state.end_txid
        call = self.loggers.fan_out(QJOURNAL.finalize_log_segment,
                                    lambda lg: lg.finalize_log_segment(segment_txid, end))
        await self._writer_quorum(call, s.finalize_segment_timeout_ms)
        log.info("journal %r: recovered segment %d-%d", self.jid, segment_txid, end)

    def _storage_info(self) -> str:
        return self.ns_info.storage_info if self.ns_info is not None else ""

    async def _source_urls(self, sources: tuple[str, ...], segment_txid: int) -> list[tuple[str, str]]:
        """(node, URL) of every tied source whose HTTP address is known or learnable."""
        out: list[tuple[str, str]] = []
        for name in sources:
            lg = self.loggers.by_name(name)
            if lg.http_url is None:
                try:
                    await asyncio.wait_for(lg.get_journal_state(),
                                           self.settings.get_journal_state_timeout_ms / 1000.0)
                except (QJournalError, asyncio.TimeoutError) as e:
                    log.warning("journal %r: cannot learn the HTTP address of source %s: %s",
                                self.jid, name, e)
                    continue
            if lg.http_url:
                out.append((name, lg.segment_url(segment_txid, self._storage_info())))
        if not out:
            raise QuorumError(f"journal {self.jid!r}: no recovery source of segment {segment_txid} "
                              f"has a known HTTP address: {list(sources)}", jid=self.jid)
        return out

    async def _accept_with_fallback(self, lg: AsyncLogger, state: SegmentState,
                                    urls: list[tuple[str, str]], window: _AcceptWindow) -> None:
        """accept_recovery on one node, trying each tied source's URL in turn.

        The node's own URL goes first when it is a source (no download), then the
        others starting at a position that depends on the node (spreads the load).
        No retry starts after the accept quorum was decided (``window`` closed).
        """
        order = [u for u in urls if u[0] == lg.name]
        others = [u for u in urls if u[0] != lg.name]
        if others:
            k = sorted(x.name for x in self.loggers.loggers).index(lg.name) % len(others)
            order += others[k:] + others[:k]
        last: BaseException | None = None
        for i, (src, url) in enumerate(order):
            if i > 0 and not window.open:
                break
            try:
                return await lg.accept_recovery(state, url)
            except (InvariantViolation, EpochError):
                raise
            except QJournalError as e:
                last = e
                if i + 1 < len(order):
                    log.warning("journal %r: accept_recovery on %s with source %s failed (%s); "
                                "trying the next equally good source", self.jid, lg.name, src, e)
        assert last is not None
        raise last

    # -- writing -------------------------------------------------------------------------
    async def start_log_segment(self, txid: int,
                                layout_version: int = LAYOUT_VERSION) -> QuorumOutputStream:
        """Start segment ``txid`` on a quorum and return its output stream.

        Raises:
            JournalError: not the writer, or a stream is still open.
            QuorumError / FencedError / RpcTimeoutError: no quorum started it.
        """
        self._check_writable()
        if self._stream is not None:
            raise JournalError(f"journal {self.jid!r}: segment {self._stream.segment_txid} is still "
                               f"open; finalize it before starting segment {txid}", jid=self.jid)
        call = self.loggers.fan_out(QJOURNAL.start_log_segment,
                                    lambda lg: lg.start_log_segment(txid, layout_version))
        await self._writer_quorum(call, self.settings.start_segment_timeout_ms)
        self._stream = QuorumOutputStream(
            self.loggers, self.settings, txid, layout_version, check_writer=self._check_writable,
            on_synced=self._on_synced, on_failure=self._on_write_failure,
            on_closed=self._on_stream_closed)
        return self._stream

    async def finalize_log_segment(self, first_txid: int, last_txid: int) -> None:
        """Finalize a segment on a quorum.

        Raises:
            QuorumError / FencedError / RpcTimeoutError: no quorum finalized it.
        """
        self._check_writable()
        if self._stream is not None and self._stream.segment_txid == first_txid:
            if self._stream.last_synced_txid != last_txid:
                raise JournalError(
                    f"journal {self.jid!r}: finalizing segment {first_txid}-{last_txid} but only "
                    f"txids up to {self._stream.last_synced_txid} were synced", jid=self.jid)
            self._stream = None
        call = self.loggers.fan_out(QJOURNAL.finalize_log_segment,
                                    lambda lg: lg.finalize_log_segment(first_txid, last_txid))
        await self._writer_quorum(call, self.settings.finalize_segment_timeout_ms)

    async def confirm_writer(self) -> None:
        """An epoch-checked ``heartbeat`` on every node; return once a quorum accepted it.

        Each heartbeat is queued behind the node's pending calls, so every accepting node
        checked this writer's epoch after the call began: no newer writer can complete its
        quorum of promises, and so acknowledge anything, before then (quorum intersection).
        It also carries the committed txid to the nodes (the standby's in-progress tail).

        Raises:
            FencedError / QuorumError / RpcTimeoutError: not confirmed; like any failed quorum
                write it stops this writer for good (invariant 4).
        """
        self._check_writable()
        call = self.loggers.fan_out(QJOURNAL.heartbeat, lambda lg: lg.heartbeat())
        await self._writer_quorum(call, self.settings.write_txns_timeout_ms)

    async def purge_logs_older_than(self, min_txid_to_keep: int) -> None:
        """Ask every node to purge; fire and forget (failures are only logged)."""
        self._check_writable()
        call = self.loggers.fan_out(QJOURNAL.purge_logs, lambda lg: lg.purge_logs(min_txid_to_keep))

        async def _log_result() -> None:
            try:
                await call.wait(self.loggers.all_rule(), self.settings.operations_timeout_ms)
            except Exception as e:  # noqa: BLE001 - purge is best effort
                log.warning("journal %r: purge of txids below %d failed on some nodes: %s",
                            self.jid, min_txid_to_keep, e)
        t = asyncio.get_running_loop().create_task(_log_result())
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    # -- reading --------------------------------------------------------------------------
    async def get_merged_manifest(self, since_txid: int = 0,
                                  in_progress_ok: bool = False) -> MergedManifest:
        """Manifests of a quorum, merged (see :func:`merge_manifests`).

        Raises:
            QuorumError / RpcTimeoutError: no quorum answered (HDFS-3891: never
                silently fewer).
        """
        call = self.loggers.fan_out(
            QJOURNAL.get_edit_log_manifest,
            lambda lg: lg.get_edit_log_manifest(since_txid, in_progress_ok))
        res = await self.loggers.wait_for_quorum(call, self.settings.select_input_streams_timeout_ms)
        manifests: dict[str, Manifest] = dict(sorted(res.items()))
        epochs = {n: m.last_writer_epoch for n, m in manifests.items()
                  if m.last_writer_epoch is not None}
        merged = merge_manifests(manifests, in_progress_ok, epochs or None)
        self._last_manifest = merged
        return merged

    async def get_manifest(self, since_txid: int = 0,
                           in_progress_ok: bool = False) -> list[SegmentInfo]:
        """Segments holding txids >= ``since_txid`` on a quorum (see :meth:`get_merged_manifest`).

        Raises:
            QuorumError / RpcTimeoutError: no quorum answered.
        """
        merged = await self.get_merged_manifest(since_txid, in_progress_ok)
        return [s for s in merged.segments if s.end_txid >= since_txid]

    async def get_journaled_edits(self, since_txid: int) -> ChosenEdits:
        """One round of ``get_journaled_edits`` on every node: the committed edits from
        ``since_txid`` that a majority of the answering nodes hold (see
        :func:`~qjournal.client.rpc_reader.choose_journaled_edits` for the rule).

        Raises:
            CacheMissError: no majority of the nodes could answer from their caches, or
                committed edits exist that a majority's caches lack (stream instead).
            InvariantViolation: two nodes hold different bytes for a committed txid.
        """
        max_txns = max(1, self.settings.tail_rpc_max_txns)
        call = self.loggers.fan_out(QJOURNAL.get_journaled_edits,
                                    lambda lg: lg.get_journaled_edits(since_txid, max_txns))
        try:
            res = await self.loggers.wait_for_quorum(call, self.settings.select_input_streams_timeout_ms)
        except QJournalError as e:
            raise CacheMissError(f"journal {self.jid!r}: no majority of edit caches answered from txid "
                                 f"{since_txid}: {e}", jid=self.jid, since_txid=since_txid) from e
        self.bytes_rpc += sum(len(a.records) for a in res.values())
        return choose_journaled_edits(res, since_txid, self.loggers.majority, max_txns, self.jid)

    async def open_input(self, from_txid: int, to_txid: int | None = None,
                         in_progress_ok: bool = False) -> EditLogInputStream:
        """A stream from ``from_txid``: with ``in_progress_ok`` and
        ``dfs.ha.tail-edits.in-progress``, the edits a majority of edit caches hold
        (module docstring, step 4); otherwise, or on a miss, the segments streamed.

        Raises:
            GapInTransactionsError: the manifest has a hole inside the range.
            QuorumError / RpcTimeoutError: no quorum answered the manifest.
        """
        if in_progress_ok and self.settings.tail_in_progress and (to_txid is None or to_txid >= from_txid):
            first = await self._journaled_edits_or_miss(from_txid)
            if first is not None:
                return RpcEditLogInputStream(self.jid, first, self._more_journaled_edits, to_txid)
            self.rpc_fallbacks += 1
            log.debug("journal %r: tailing from txid %d streams segments: %s", self.jid, from_txid,
                      self.last_rpc_miss)
        return await super().open_input(from_txid, to_txid, in_progress_ok)

    async def _journaled_edits_or_miss(self, since_txid: int) -> ChosenEdits | None:
        """One RPC tailing round, counted; None on a miss (remembered in ``last_rpc_miss``)."""
        try:
            got = await self.get_journaled_edits(since_txid)
        except CacheMissError as e:
            self.last_rpc_miss = str(e)
            return None
        self.rpc_reads += 1
        return got

    async def _more_journaled_edits(self, since_txid: int) -> ChosenEdits:
        """The next round of a full answer; a miss there ends the stream (the next
        ``open_input`` falls back to streaming)."""
        got = await self._journaled_edits_or_miss(since_txid)
        return got if got is not None else ChosenEdits(since_txid, since_txid - 1, b"", False)

    async def _ensure_http_urls(self, names: tuple[str, ...]) -> None:
        missing = [self.loggers.by_name(n) for n in names if self.loggers.by_name(n).http_url is None]
        if not missing:
            return
        futs = [lg.get_journal_state() for lg in missing]
        res = await asyncio.gather(*futs, return_exceptions=True)
        if self.ns_info is None:
            ok = {lg.name: r for lg, r in zip(missing, res) if isinstance(r, JournalState)}
            try:
                self.ns_info = _ns_info_from_states(ok, self.jid)
            except QJournalError:
                pass

    async def _fetch(self, name: str, segment_txid: int, in_progress_ok: bool) -> SegmentDownload:
        """The default segment fetcher: one node's copy of a segment from its ``/getJournal``,
        over HTTP(S), or through the memory network for a ``mem://`` URL; the body streams in
        chunks of at most ``qjournal.segment-transfer.chunk.bytes``.

        Raises:
            TransportError: the node's HTTP address is unknown, or the download failed.
        """
        lg = self.loggers.by_name(name)
        url = lg.segment_url(segment_txid, self._storage_info(), in_progress_ok)
        if not url.startswith(("http://", "https://")):
            if self._network is None:
                raise TransportError(f"journal {self.jid!r}: cannot download {url[:200]} from "
                                     f"{name}: not an HTTP URL and no memory network", url=url[:200])
            # An in-process JournalNode without HTTP serves mem:// URLs on the memory network.
            return await self._network.fetch(url)
        if self._http is None:
            # dfs.http.policy = HTTPS_ONLY: the JournalNodes require our client certificate.
            client_ctx = http_client_context(self._conf)
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=client_ctx) if client_ctx is not None else None)
        s = self.settings
        return await http_download(self._http, url, chunk_bytes=s.transfer_chunk_bytes,
                                   connect_timeout_s=s.http_open_timeout_ms / 1000.0,
                                   read_timeout_s=s.http_read_timeout_ms / 1000.0)

    async def open_segment(self, seg: SegmentInfo, from_txid: int | None = None) -> EditLogInputStream:
        """A stream over one segment of the last manifest, from any replica.

        Raises:
            JournalError: no replica of the segment is known.
        """
        merged = self._last_manifest
        known = None if merged is None else next(
            (s for s in merged.segments if s.start_txid == seg.start_txid), None)
        if known is None or known.end_txid < seg.end_txid or known.in_progress != seg.in_progress:
            merged = await self.get_merged_manifest(seg.start_txid, seg.in_progress)
        replicas = merged.replicas.get(seg.start_txid, ())
        chosen = next((s for s in merged.segments if s.start_txid == seg.start_txid), None)
        if chosen is None or not replicas:
            raise JournalError(f"journal {self.jid!r}: no JournalNode has segment "
                               f"{seg.start_txid}-{seg.end_txid}", jid=self.jid)
        if seg.end_txid > chosen.end_txid:
            raise JournalError(f"journal {self.jid!r}: segment {seg.start_txid} is known only up to "
                               f"txid {chosen.end_txid}, asked for {seg.end_txid}", jid=self.jid)
        await self._ensure_http_urls(replicas)
        # Rotate the first replica per opened stream so readers spread the load
        # (deterministic: no randomness in the client); fail over in order.
        self._reads_opened += 1
        k = self._reads_opened % len(replicas)
        order = tuple(replicas[k:] + replicas[:k])
        fetch = self._segment_fetcher or self._fetch
        return QuorumSegmentInputStream(self.jid, seg, order, fetch, from_txid,
                                        max_record_bytes=self.settings.max_record_bytes,
                                        on_bytes=self._count_streamed)

    def _count_streamed(self, n: int) -> None:
        self.bytes_streamed += n

    # -- status / close ---------------------------------------------------------------------
    async def node_status(self) -> dict[str, NodeStatus]:
        """Per node: journal state and manifest, or the error (for ``qjournal log status``).

        Waits for every node up to the operations timeout; never raises for a node.

        Returns:
            node name -> its :class:`NodeStatus`, sorted by name.
        """
        async def one(lg: AsyncLogger) -> NodeStatus:
            state: JournalState | None = None
            try:
                state = await asyncio.wait_for(lg.get_journal_state(),
                                               self.settings.operations_timeout_ms / 1000.0)
                manifest = await lg.get_edit_log_manifest(0, True)
            except Exception as e:  # noqa: BLE001 - reported per node
                return NodeStatus(lg.name, state, None, f"{type(e).__name__}: {e}")
            return NodeStatus(lg.name, state, manifest)

        res = await asyncio.gather(*(one(lg) for lg in self.loggers.loggers))
        return {st.node: st for st in sorted(res, key=lambda st: st.node)}

    async def close(self, drain_timeout_ms: int = 1000) -> None:
        """Close every logger and the HTTP session (the segment stays as it is).

        Args:
            drain_timeout_ms: first give calls already queued for slower nodes (e.g. the
                last finalize) this long to complete, so those nodes stay in step.
        """
        if drain_timeout_ms > 0:
            await asyncio.gather(*(lg.drain(drain_timeout_ms / 1000.0)
                                   for lg in self.loggers.loggers))
        for t in list(self._bg):
            t.cancel()
        await self.loggers.close()
        if self._http is not None:
            await self._http.close()
            self._http = None


async def _require_true(fut: Any, name: str, jid: str) -> bool:
    ok = await fut
    if not ok:
        raise JournalNotFormattedError(f"journal {jid!r} is not formatted on {name}", node=name)
    return True


def _ns_info_from_states(states: Mapping[str, JournalState], jid: str) -> NamespaceInfo:
    """The namespace of a journal, from ``get_journal_state`` answers.

    Raises:
        JournalNotFormattedError: no answering node is formatted.
        JournalError: nodes disagree about the namespace.
    """
    found: list[tuple[str, NamespaceInfo]] = []
    for name in sorted(states):
        ns = states[name].ns_info
        if ns is not None:
            found.append((name, ns))
    if not found:
        raise JournalNotFormattedError(
            f"journal {jid!r} is not formatted on any answering JournalNode "
            f"({', '.join(sorted(states))}); run 'qjournal log format'", jid=jid)
    first = found[0][1]
    for name, ns in found[1:]:
        if (ns.namespace_id, ns.cluster_id) != (first.namespace_id, first.cluster_id):
            raise JournalError(f"journal {jid!r}: JournalNodes disagree on the namespace: "
                               f"{found[0][0]} has {first}, {name} has {ns}", jid=jid)
    return first

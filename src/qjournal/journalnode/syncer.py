"""JournalNodeSyncer (HDFS-4025): a JournalNode gets its redundancy back by copying, from its peers,
the finalized segments it missed, and (HDFS-16690) formats a wiped journal from them.

Why: a JournalNode that was down, paused or out of sync while a segment was written never receives
it from the writer, so the segment lives on a bare majority until it is purged and one more failure
can lose it. The syncer closes that window without the writer: every
``dfs.journalnode.sync.interval`` it asks each peer for its manifest (with digests of the finalized
segments), lets the journal decide what to copy (:mod:`qjournal.protocol.sync_rules`, pure), streams
each missing segment from the peers' ``/getJournal`` into the journal's tmp file
(:func:`~qjournal.journalnode.sync_installer.synced_tmp_name`, chunk by chunk: memory use does not depend on
the segment's size) and has the journal verify and install it atomically
(:meth:`SyncInstaller.install_synced_segment <qjournal.journalnode.sync_installer.SyncInstaller.install_synced_segment>`).

Theory of operation:

* Peers come from the node's own configuration, as in Hadoop: every ``qjournal://`` URI in
  ``dfs.namenode.shared.edits.dir`` and its ``.<nameservice>`` forms that lists this node's RPC address
  names a journal id and its other members (:func:`syncer_targets`). A node listed in none logs why
  it does not sync.
* One syncer task per journal id, started with :func:`~qjournal.util.tasks.spawn`: a round that fails
  (a peer down, a download cut) is logged and counted, and the next round runs; anything else ending
  the loop is a crashed task (logged, process ends).
* A segment is fetched from the first peer in round-robin order that lists it; a failed download is
  retried from the next peer that lists it in the same round.
* Conflicts (two finalized copies that differ, sync rule 5) are logged as errors each round they are
  seen, counted, and shown on the status page and in ``/jmx`` and ``/metrics``; nothing is replaced.
* Format from peers (``dfs.journalnode.enable.sync.format``): an unformatted, empty journal takes the
  namespace a majority of its peers report, promises the highest epoch they promised, and refuses to
  vote until its finalized segments cover every txid any peer held (``rejoin_txid``), because a node
  that lost its disk could otherwise form a quorum with a lagging node and choose a history without
  txids that it and one other node had acknowledged.
* Downloads are throttled to ``dfs.edit.log.transfer.bandwidthPerSec`` (0: no limit), as the serving
  side is.

Invariants:

1. The syncer never writes a segment file itself: every change goes through the journal's thread
   (the download's chunks through ``append_download`` into a tmp file; ``install_synced_segment``,
   ``format_from_peers``, ``finish_rejoin``), which re-checks the rules.
2. At most one round of a journal runs at a time (one task).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

from qjournal.errors import QJournalError
from qjournal.journalnode.sync_installer import synced_tmp_name
from qjournal.protocol.journal_uri import parse_qjournal_uri, segment_url
from qjournal.protocol.messages import JournalState, Manifest, NamespaceInfo, SegmentState
from qjournal.protocol.segment import INVALID_TXID
from qjournal.protocol.sync_rules import finalized_replicas
from qjournal.transport import RpcClient, RpcConnector
from qjournal.protocol.protocols import QJOURNAL

__all__ = ["JournalSyncer", "SyncerSettings", "SyncerStats", "syncer_targets"]

log = logging.getLogger(__name__)

#: ``name -> awaitable`` running ``Journal.<name>(*args)`` on the journal's thread
JournalCall = Callable[..., Awaitable[Any]]
#: ``(url, tmp file) -> bytes written``: streams the body into the journal's tmp file (transport
#: checksum verified; the tmp file deleted when it fails)
SegmentDownload = Callable[[str, str], Awaitable[int]]


@dataclass(frozen=True)
class SyncerSettings:
    """The syncer's configuration (``dfs.journalnode.*``)."""

    interval_s: float = 120.0
    format_enabled: bool = False
    rpc_timeout_ms: int = 20000


@dataclass
class SyncerStats:
    """What the status page, ``/jmx`` and ``/metrics`` show of one journal's syncer."""

    peers: tuple[str, ...] = ()
    rounds: int = 0
    rounds_failed: int = 0
    segments_synced: int = 0
    bytes_synced: int = 0
    download_failures: int = 0
    last_round_s: float = 0.0
    last_error: str | None = None
    formatted_from_peers: bool = False
    under_replicated: tuple[int, ...] = ()
    conflicts: tuple[str, ...] = ()
    conflict_segments: tuple[int, ...] = ()
    replicas: dict[int, int] = field(default_factory=dict)

    def to_status(self) -> dict:
        return {"peers": list(self.peers), "rounds": self.rounds, "rounds_failed": self.rounds_failed,
                "segments_synced": self.segments_synced, "bytes_synced": self.bytes_synced,
                "download_failures": self.download_failures, "last_round_s": self.last_round_s,
                "last_error": self.last_error, "formatted_from_peers": self.formatted_from_peers,
                "under_replicated_segments": list(self.under_replicated),
                "conflicts": list(self.conflicts), "conflict_segments": list(self.conflict_segments),
                "replicas": {str(k): v for k, v in sorted(self.replicas.items())}}

    def to_metrics(self) -> dict:
        """Hadoop-style bean attributes (``Journal-<jid>``)."""
        return {"SyncerRounds": self.rounds, "SyncerRoundsFailed": self.rounds_failed,
                "SyncerSegmentsSynced": self.segments_synced, "SyncerBytesSynced": self.bytes_synced,
                "SyncerDownloadFailures": self.download_failures,
                "UnderReplicatedSegments": len(self.under_replicated),
                "SyncConflicts": len(self.conflict_segments)}


def syncer_targets(uris: Iterable[str], is_self: Callable[[str, int], bool]) -> dict[str, list[tuple[str, int]]]:
    """``jid -> peers`` for every journal URI that lists this node.

    Args:
        uris: the configured ``qjournal://`` URIs (others are ignored).
        is_self: whether ``(host, port)`` is this node's RPC address.

    Raises:
        ConfigError: a malformed qjournal URI.
    """
    out: dict[str, list[tuple[str, int]]] = {}
    for uri in uris:
        if not uri or not uri.startswith("qjournal://"):
            continue
        addrs, jid = parse_qjournal_uri(uri)
        mine = [a for a in addrs if is_self(*a)]
        if mine:
            out[jid] = [a for a in addrs if a not in mine]
    return out


class JournalSyncer:
    """The syncer of one journal id on one JournalNode.

    Args:
        jid: the journal id.
        peers: the other JournalNodes of the journal's URI, ``(host, port)``.
        journal_call: runs a ``Journal`` method on the journal's thread.
        connect: opens an RPC connection to a peer.
        download: streams a ``/getJournal`` URL into a tmp file of the journal (checksum verified,
            throttled).
        settings: interval, format-from-peers, RPC deadline.
        clock: seconds (monotonic), for ``last_round_s``.
        warm_digest: computes (and caches) this node's digest of a finalized segment off the journal's
            thread before ``sync_plan`` needs it (None: ``sync_plan`` computes it inline).
    """

    def __init__(self, jid: str, peers: list[tuple[str, int]], journal_call: JournalCall,
                 connect: RpcConnector, download: SegmentDownload, settings: SyncerSettings,
                 clock: Callable[[], float] = time.monotonic,
                 warm_digest: Callable[[SegmentState], Awaitable[None]] | None = None) -> None:
        self.jid = jid
        self.peers = list(peers)
        self._journal = journal_call
        self._connect = connect
        self._download = download
        self.settings = settings
        self._clock = clock
        self._warm_digest = warm_digest
        self._clients: dict[tuple[str, int], RpcClient] = {}
        self._next_peer = 0
        self._conflicts_logged: set[str] = set()
        self.stats = SyncerStats(peers=tuple(f"{h}:{p}" for h, p in self.peers))

    # --- the loop ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds forever, ``interval_s`` apart (the first one at once)."""
        while True:
            await self.sync_once()
            await asyncio.sleep(self.settings.interval_s)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for c in clients.values():
            await c.close()

    async def sync_once(self) -> None:
        """One round: manifests of every peer, format from them if allowed and needed, copy what is
        missing, report conflicts and replica counts, finish a rejoin. A failure of the round is
        logged and counted (the next round retries)."""
        t0 = self._clock()
        try:
            await self._round()
            self.stats.last_error = None
        except (QJournalError, OSError) as e:
            self.stats.rounds_failed += 1
            self.stats.last_error = str(e)
            log.warning("journal %s: sync round failed: %s", self.jid, e)
        finally:
            self.stats.rounds += 1
            self.stats.last_round_s = self._clock() - t0

    async def _round(self) -> None:
        manifests: dict[tuple[str, int], Manifest] = {}
        states: dict[tuple[str, int], JournalState] = {}
        for peer in self.peers:
            try:
                states[peer] = JournalState.from_wire(await self._call(peer, QJOURNAL.get_journal_state, jid=self.jid))
                manifests[peer] = Manifest.from_wire(await self._call(
                    peer, QJOURNAL.get_edit_log_manifest, jid=self.jid, since_txid=0, in_progress_ok=True,
                    with_digests=True))
            except QJournalError as e:
                log.debug("journal %s: peer %s:%d unavailable to the syncer: %s", self.jid, *peer, e)
        if not await self._journal("is_formatted"):
            if not self.settings.format_enabled:
                return
            if not await self._format_from_peers(states, manifests):
                return
        status = await self._journal("status")
        storage_info = NamespaceInfo(status["namespace_id"], status["cluster_id"]).storage_info
        await self._copy_missing(states, manifests, storage_info)
        await self._count_replicas(manifests)
        if manifests and status["rejoin_txid"] is not None:
            starts = [s.start_txid for m in manifests.values() for s in m.segments]
            await self._journal("sync.finish_rejoin", min(starts) if starts else 1)

    async def _call(self, peer: tuple[str, int], method: str, **kwargs: Any) -> Any:
        client = self._clients.get(peer)
        if client is None or client.is_closed:
            client = await self._connect(*peer)
            self._clients[peer] = client
        try:
            return await client.call(method, timeout_ms=self.settings.rpc_timeout_ms, **kwargs)
        except QJournalError:
            if client.is_closed:
                self._clients.pop(peer, None)
            raise

    # --- format from peers (HDFS-16690) ------------------------------------------------------------

    async def _format_from_peers(self, states: dict[tuple[str, int], JournalState],
                                 manifests: dict[tuple[str, int], Manifest]) -> bool:
        votes: dict[NamespaceInfo, int] = {}
        for st in states.values():
            if st.ns_info is not None:
                votes[st.ns_info] = votes.get(st.ns_info, 0) + 1
        best = max(votes.items(), key=lambda kv: kv[1], default=None)
        if best is None:
            log.debug("journal %s: not formatting from peers: none of them is formatted", self.jid)
            return False
        if best[1] * 2 <= len(self.peers):
            log.warning("journal %s: not formatting from peers: no namespace is reported by a majority of "
                        "the %d peers (%s)", self.jid, len(self.peers),
                        ", ".join(f"{ns}: {n}" for ns, n in sorted(votes.items(), key=str)) or "none answered")
            return False
        promised = max(st.last_promised_epoch for st in states.values() if st.ns_info == best[0])
        if promised == 0:
            # No writer has started on the peers: a `namenode -format` may be formatting every node
            # right now, and this node's format would make it fail. Nothing is lost by waiting.
            log.info("journal %s: not formatting from peers yet: no writer has used them (epoch 0)", self.jid)
            return False
        held = [s.end_txid for m in manifests.values() for s in m.segments]
        held += [m.committed_txid for m in manifests.values() if m.committed_txid != INVALID_TXID]
        rejoin_txid = max(held, default=0)
        await self._journal("sync.format_from_peers", best[0], promised, rejoin_txid)
        self.stats.formatted_from_peers = True
        return True

    # --- copying ------------------------------------------------------------------------------------

    async def _copy_missing(self, states: dict[tuple[str, int], JournalState],
                            manifests: dict[tuple[str, int], Manifest], storage_info: str) -> None:
        peers = [p for p in self.peers if p in manifests]
        if not peers:
            return
        k = self._next_peer % len(peers)
        self._next_peer += 1
        order = peers[k:] + peers[:k]
        done: set[int] = set()
        conflicts: list[str] = []
        conflict_segments: set[int] = set()
        for peer in order:
            if self._warm_digest is not None:
                for seg in manifests[peer].segments:
                    if seg.digest is not None and not seg.in_progress:
                        await self._warm_digest(seg)
            plan = await self._journal("sync.sync_plan", manifests[peer])
            for c in plan.conflicts:
                text = f"with {peer[0]}:{peer[1]}: {c}"
                conflicts.append(text)
                conflict_segments.add(c.local.start_txid)
                if text not in self._conflicts_logged:
                    self._conflicts_logged.add(text)
                    log.error("journal %s: finalized copies disagree, %s; nothing is replaced (an operator "
                              "must decide which copy is damaged)", self.jid, text)
            for seg in plan.fetch:
                if seg.start_txid in done:
                    continue
                if await self._fetch_one(seg, peer, order, states, manifests, storage_info):
                    done.add(seg.start_txid)
        self.stats.conflicts = tuple(sorted(set(conflicts)))
        self.stats.conflict_segments = tuple(sorted(conflict_segments))

    async def _fetch_one(self, seg: SegmentState, first: tuple[str, int], order: list[tuple[str, int]],
                         states: dict[tuple[str, int], JournalState],
                         manifests: dict[tuple[str, int], Manifest], storage_info: str) -> bool:
        holders = [first] + [p for p in order if p != first and any(
            s.start_txid == seg.start_txid and s.end_txid == seg.end_txid and not s.in_progress
            for s in manifests[p].segments)]
        for peer in holders:
            st = states.get(peer)
            if st is None or not st.http_url:
                continue
            url = segment_url(st.http_url, self.jid, seg.start_txid, storage_info, in_progress_ok=False)
            try:
                size = await self._download(url, synced_tmp_name(seg))
                installed = await self._journal("sync.install_synced_segment", seg,
                                                manifests[peer].committed_txid)
            except QJournalError as e:
                self.stats.download_failures += 1
                log.warning("journal %s: copying finalized segment %s from %s:%d failed: %s", self.jid, seg,
                            *peer, e)
                continue
            if installed:
                self.stats.segments_synced += 1
                self.stats.bytes_synced += size
                log.info("journal %s: copied finalized segment %s (%d bytes) from %s:%d", self.jid, seg,
                         size, *peer)
            return True
        return False

    async def _count_replicas(self, manifests: dict[tuple[str, int], Manifest]) -> None:
        """Finalized segments held finalized by fewer than all nodes (unreachable peers count as not
        holding them), for the status page and metrics."""
        own: Manifest = await self._journal("get_edit_log_manifest", 0, False)
        replicas = finalized_replicas([own, *manifests.values()])
        total = len(self.peers) + 1
        self.stats.replicas = {start: n for (start, _end), n in replicas.items()}
        self.stats.under_replicated = tuple(start for (start, _end), n in replicas.items() if n < total)

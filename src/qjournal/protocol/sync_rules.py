"""The JournalNodeSyncer's decisions: which finalized segments a node copies from a peer, and which
copies disagree. Pure: no I/O, clock or randomness (STYLE principle 1), tested by a table.

Why a syncer at all (HDFS-4025): a JournalNode that was down, paused or out of sync when a segment was
written never receives it, so that segment lives on a bare majority until it is purged, and one more
failure can lose it. Each node therefore compares its finalized segments with its peers' and copies
what it lacks. What makes that safe is what it never does, so the rules are written down here once:

1. Only **finalized** segments of a peer are copied. A finalized segment is decided: every finalized
   copy of a segment in any node holds the same records (journal invariant 10, recovery invariant 9),
   so one more copy changes no decision. An in-progress segment is the writer's and recovery's.
2. Only segments **known committed**: the segment's end txid is at most the larger of the node's own
   committed txid and the committed txid the peer reported (both come from writers; Hadoop's syncer
   installs only ``end <= committedTxId``).
3. Never what was **purged**: a segment that ends below the node's last ``purge_logs`` bound is not
   re-fetched (the writer asked every node to drop it).
4. Never over a segment the node **holds in progress** as its open segment (a writer writes it here)
   or as its newest segment (recovery decides it, and replaces it if needed). A stale in-progress copy
   of an older segment (a missed finalize) is superseded by the finalized copy.
5. Never **replaces** a finalized copy: two finalized copies of one segment with other end txids, or
   the same end txid and other digests, or a peer's finalized segment that overlaps one of ours with
   another start, is a conflict: reported loudly, never repaired silently (an operator decides which
   copy is damaged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from qjournal.protocol.messages import Manifest, SegmentState
from qjournal.protocol.segment import INVALID_TXID

__all__ = ["LocalSegments", "SyncConflict", "SyncPlan", "plan_sync", "known_committed", "rejoin_complete",
           "finalized_replicas"]


@dataclass(frozen=True)
class LocalSegments:
    """What the node holds, as the rules need it.

    ``finalized`` maps a start txid to its finalized state (with its digest when the caller computed
    it); ``in_progress`` are the start txids of in-progress files; ``open_segment`` is the start of the
    segment a writer has open here (None when none); ``committed_txid`` and ``purged_below`` are the
    node's own (INVALID_TXID / 0 when unknown).
    """

    finalized: dict[int, SegmentState] = field(default_factory=dict)
    in_progress: frozenset[int] = frozenset()
    open_segment: int | None = None
    committed_txid: int = INVALID_TXID
    purged_below: int = 0

    @property
    def newest_start(self) -> int | None:
        starts = list(self.finalized) + list(self.in_progress)
        return max(starts) if starts else None


@dataclass(frozen=True)
class SyncConflict:
    """Two copies of a segment that must be equal and are not (rule 5)."""

    segment: SegmentState          # the peer's copy
    local: SegmentState            # ours
    why: str

    def __str__(self) -> str:
        return f"segment {self.segment.start_txid}: ours {self.local}, the peer's {self.segment}: {self.why}"


@dataclass(frozen=True)
class SyncPlan:
    """``fetch``: the peer's segments to copy, by start; ``conflicts``; ``skipped``: (segment, rule)."""

    fetch: tuple[SegmentState, ...] = ()
    conflicts: tuple[SyncConflict, ...] = ()
    skipped: tuple[tuple[SegmentState, str], ...] = ()


def known_committed(own: int, peer: int) -> int:
    """The highest txid either report says is committed (INVALID_TXID when neither knows)."""
    known = [t for t in (own, peer) if t != INVALID_TXID]
    return max(known) if known else INVALID_TXID


def _overlapping(seg: SegmentState, finalized: Iterable[SegmentState]) -> SegmentState | None:
    for mine in finalized:
        if mine.start_txid != seg.start_txid and mine.start_txid <= seg.end_txid \
                and seg.start_txid <= mine.end_txid:
            return mine
    return None


def plan_sync(local: LocalSegments, peer: Manifest) -> SyncPlan:
    """The rules of the module docstring applied to one peer's manifest.

    Args:
        local: the node's segments.
        peer: the peer's manifest (finalized segments carry digests when it computed them).

    Returns:
        The plan, every list sorted by start txid.
    """
    committed = known_committed(local.committed_txid, peer.committed_txid)
    newest = local.newest_start
    fetch: list[SegmentState] = []
    conflicts: list[SyncConflict] = []
    skipped: list[tuple[SegmentState, str]] = []
    for seg in sorted(peer.segments, key=lambda s: s.start_txid):
        if seg.in_progress:
            continue                                                  # rule 1
        mine = local.finalized.get(seg.start_txid)
        if mine is not None:                                          # rule 5
            if mine.end_txid != seg.end_txid:
                conflicts.append(SyncConflict(seg, mine, "finalized at different end txids"))
            elif mine.digest is not None and seg.digest is not None and mine.digest != seg.digest:
                conflicts.append(SyncConflict(seg, mine, f"same txids, other contents (digest "
                                                         f"{mine.digest:08x} here, {seg.digest:08x} there)"))
            continue
        other = _overlapping(seg, local.finalized.values())
        if other is not None:
            conflicts.append(SyncConflict(seg, other, "overlaps a finalized segment with another start"))
            continue
        if seg.end_txid < local.purged_below:                        # rule 3
            skipped.append((seg, "purged"))
            continue
        if committed == INVALID_TXID or seg.end_txid > committed:    # rule 2
            skipped.append((seg, "not known committed"))
            continue
        if seg.start_txid in local.in_progress and (
                seg.start_txid == local.open_segment or seg.start_txid == newest):
            skipped.append((seg, "in progress here"))                 # rule 4
            continue
        fetch.append(seg)
    return SyncPlan(tuple(fetch), tuple(conflicts), tuple(skipped))


def rejoin_complete(finalized: Iterable[SegmentState], rejoin_txid: int, first_needed: int) -> bool:
    """Whether a node formatted from its peers holds again every txid it may have lost.

    Such a node refuses to vote in a writer's election or recovery (it could otherwise form a
    quorum with a lagging node and choose a history without txids that were acknowledged by it
    and one other node before its disk was lost). It rejoins once its finalized segments cover
    every txid from ``first_needed`` (the oldest txid its peers still keep) through ``rejoin_txid``
    (the highest txid any peer held when it was formatted) without a gap.
    """
    need = first_needed
    for seg in sorted(finalized, key=lambda s: s.start_txid):
        if need > rejoin_txid:
            break
        if seg.end_txid < need:
            continue
        if seg.start_txid > need:
            return False
        need = seg.end_txid + 1
    return need > rejoin_txid


def finalized_replicas(manifests: Iterable[Manifest]) -> dict[tuple[int, int], int]:
    """``(start, end) -> how many of the manifests hold that finalized segment``, for the segments in
    the retention window every manifest still covers (from the highest oldest start), sorted.

    A segment below some node's oldest segment was purged there (or is about to be everywhere), so
    it is not counted as missing; a node that did not answer is simply not among ``manifests``.
    """
    ms = list(manifests)
    held: dict[tuple[int, int], int] = {}
    for m in ms:
        for s in m.segments:
            if not s.in_progress:
                held[(s.start_txid, s.end_txid)] = held.get((s.start_txid, s.end_txid), 0) + 1
    floor = max((m.segments[0].start_txid for m in ms if m.segments), default=0)
    return {k: n for k, n in sorted(held.items()) if k[1] >= floor}

"""A journal's part in the JournalNodeSyncer (HDFS-4025, HDFS-16690): digests, what to copy, installing a
copied segment, formatting from peers and rejoining.

Why apart from the acceptor: the Paxos acceptor (:class:`~qjournal.journalnode.journal.Journal`) is
Hadoop's Journal, the writer's and the recovery's; copying finalized segments between JournalNodes and
formatting a wiped one from its peers is another role with its own rules
(:mod:`qjournal.protocol.sync_rules`), written beside it here. It reads the journal's state and index
and changes them only through these calls, under the journal's one-call-at-a-time rule
(``call_rule.py``), except :meth:`SyncInstaller.finalized_digest`, which may run on any thread: a
finalized file never changes [I10] (a damaged one changes its stamp), and its cache entry is replaced
whole, so the daemon computes digests off the journal's thread and a peer's syncer never stalls the
writer.

The syncer (``syncer.py``) reaches these as ``sync.<call>`` of its journal (``JournalNodeService.run``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from qjournal.errors import JournalAlreadyFormattedError, JournalError
from qjournal.journalnode.call_rule import one_at_a_time
from qjournal.protocol import sync_rules
from qjournal.protocol.journal_layout import LAST_PROMISED_EPOCH, REJOIN_TXID
from qjournal.protocol.messages import Manifest, NamespaceInfo, SegmentState
from qjournal.protocol.segment import segment_file_name

__all__ = ["SyncInstaller", "synced_tmp_name", "SYNC_TMP_SUFFIX"]

log = logging.getLogger("qjournal.journalnode.journal")

#: the suffix of a syncer's download (a leftover ``.tmp`` is deleted when the journal opens)
SYNC_TMP_SUFFIX = ".sync.tmp"


def synced_tmp_name(state: SegmentState) -> str:
    """The file the syncer's download of finalized segment ``state`` is written to before
    :meth:`SyncInstaller.install_synced_segment`."""
    return f"{segment_file_name(state.start_txid, state.end_txid)}{SYNC_TMP_SUFFIX}"


class SyncInstaller:
    """The sync calls of one journal (module docstring).

    Args:
        journal: the acceptor (``journal.Journal``, which makes this object: no import back) whose
            state, index and storage these calls read and change.
    """

    def __init__(self, journal: Any) -> None:
        self._j = journal
        self._index = journal.index
        self._rule = journal._rule
        self.jid = journal.jid

    def finalized_digest(self, start_txid: int, end_txid: int) -> int | None:
        """The digest of this node's finalized segment ``start_txid-end_txid`` (None when it holds no
        such file). Unlike every other method this one may run on any thread: a finalized file never
        changes [I10] (a damaged one changes its stamp), and the cache entry is replaced whole; the
        daemon computes digests off the journal's thread so a peer's syncer never stalls the writer.
        """
        try:
            return self._index.check_finalized(segment_file_name(start_txid, end_txid))[0]
        except FileNotFoundError:
            return None

    def _local_segments(self, digest_starts: frozenset[int] = frozenset()) -> sync_rules.LocalSegments:
        finalized: dict[int, SegmentState] = {}
        in_progress: set[int] = set()
        for start, end, name in self._index.segments():
            if end is None:
                in_progress.add(start)
            else:
                digest = self._index.check_finalized(name)[0] if start in digest_starts else None
                finalized[start] = SegmentState(start, end, False, digest)
        # an in-progress file hidden by a finalized one of the same start is not "in progress here"
        return sync_rules.LocalSegments(finalized, frozenset(in_progress - set(finalized)),
                                        self._j._cur.start_txid if self._j._cur is not None else None,
                                        self._j.committed_txid, self._j.purged_below)

    @one_at_a_time
    def sync_plan(self, peer: Manifest) -> sync_rules.SyncPlan:
        """Which of a peer's finalized segments to copy, and which copies conflict (rules 1-5 of
        :mod:`~qjournal.protocol.sync_rules`). A conflict's ``why`` says whether this node's own
        copy fails its checksums.

        Raises:
            JournalNotFormattedError
        """
        self._j._require_formatted()
        with_digest = frozenset(s.start_txid for s in peer.segments if s.digest is not None)
        plan = sync_rules.plan_sync(self._local_segments(with_digest), peer)
        if not plan.conflicts:
            return plan
        names = {start: name for start, end, name in self._index.segments() if end is not None}
        conflicts = []
        for c in plan.conflicts:
            name = names.get(c.local.start_txid)
            problem = self._index.check_finalized(name)[1] if name is not None else None
            verdict = f"; our copy {name} is damaged: {problem}" if problem else f"; our copy {name} is valid"
            conflicts.append(dataclasses.replace(c, why=c.why + verdict))
        return dataclasses.replace(plan, conflicts=tuple(conflicts))

    @one_at_a_time
    def install_synced_segment(self, state: SegmentState, peer_committed_txid: int) -> bool:
        """Install a finalized segment copied from a peer: the download the daemon wrote to
        :func:`synced_tmp_name` is verified (read in chunks), fsynced, renamed, and the directory
        fsynced (a crash leaves the old directory or the whole segment; a leftover ``.tmp`` is
        deleted on open). The rules are checked again first, as a writer, a recovery or a purge may
        have run during the download. The tmp file is gone when this returns or raises, unless a
        crash interrupted it.

        Args:
            state: the peer's finalized segment (with its digest when it sent one).
            peer_committed_txid: the committed txid the peer reported with it.

        Returns:
            True when installed, False when the rules now skip it (nothing changed).

        Raises:
            JournalNotFormattedError
            JournalError: no downloaded copy, the bytes do not hold exactly the segment's txids, or
                storing them failed.
        """
        tmp = synced_tmp_name(state)
        st = self._j.storage
        self._j._require_formatted()
        local = self._local_segments(frozenset([state.start_txid]) if state.digest is not None else frozenset())
        plan = sync_rules.plan_sync(local, Manifest((state,), peer_committed_txid))
        if state not in plan.fetch:
            st.delete(tmp)
            return False
        if not st.exists(tmp):
            raise JournalError(f"journal {self.jid}: no downloaded copy of finalized segment {state} in "
                               f"{tmp}", jid=self.jid, txid=state.start_txid)
        try:
            digest, problem = self._index.judge_finalized(tmp, state.start_txid, state.end_txid)
        except OSError as e:
            st.delete(tmp)
            raise JournalError(f"journal {self.jid}: reading the copy of finalized segment {state} failed: "
                               f"{e}", jid=self.jid, txid=state.start_txid) from e
        if problem is not None:
            st.delete(tmp)
            raise JournalError(f"journal {self.jid}: the copy of finalized segment {state} from a peer: "
                               f"{problem}; not installed", jid=self.jid, txid=state.start_txid)
        if state.digest is not None and digest != state.digest:
            st.delete(tmp)
            raise JournalError(f"journal {self.jid}: the copy of finalized segment {state} has digest "
                               f"{digest:08x}; not installed", jid=self.jid, txid=state.start_txid)
        target = segment_file_name(state.start_txid, state.end_txid)
        try:
            st.sync(tmp)
            self._j._hook("before_sync_rename")
            st.rename(tmp, target)
        except OSError as e:  # before the commit point: nothing installed
            st.delete(tmp)
            raise JournalError(f"journal {self.jid}: installing finalized segment {state} failed: {e}",
                               jid=self.jid, txid=state.start_txid, errno=e.errno) from e
        # The rename is the commit point: the segment is in place and served from now on, so this node's
        # records follow it at once, whatever the directory fsync below says (a failed fsync must not leave a
        # served file that the index, the digests and the highest txid do not know of).
        stale = segment_file_name(state.start_txid)
        if state.start_txid in local.in_progress and st.exists(stale):  # superseded (sync rule 4)
            self._index.move_aside(stale, ".stale")
        self._index.remember_check(target, digest, None)
        self._j.highest_written_txid = max(self._j.highest_written_txid, state.end_txid)
        self._j.metrics.num_edit_logs_synced += 1
        try:
            st.sync_dir()
        except OSError as e:
            # The file's bytes were fsynced before the rename; only the name may not survive a crash, and then
            # the segment is simply missing again and copied again. Never retried here (fsync's lesson): said.
            log.error("journal %s: installed finalized segment %s copied from a peer, but the directory fsync "
                      "failed: %s; the install may not survive a crash", self.jid, state, e)
            raise JournalError(f"journal {self.jid}: finalized segment {state} is installed but the directory "
                               f"fsync after its rename failed: {e}; it may not survive a crash",
                               jid=self.jid, txid=state.start_txid, errno=e.errno) from e
        log.info("journal %s: installed finalized segment %s copied from a peer", self.jid, state)
        return True

    @one_at_a_time
    def format_from_peers(self, ns_info: NamespaceInfo, promised_epoch: int, rejoin_txid: int) -> None:
        """Format an empty journal with the namespace its peers agree on (HDFS-16690), promise the
        highest epoch they promised (an older writer is fenced here too), and refuse to vote until
        the finalized segments through ``rejoin_txid`` are back (``finish_rejoin``).

        Raises:
            JournalAlreadyFormattedError: the journal holds data.
        """
        leftovers = [n for n in self._j.storage.list_files() if n not in (REJOIN_TXID, LAST_PROMISED_EPOCH)]
        if self._j.ns_info is not None or leftovers:  # only a crashed format-from-peers may have left those two
            raise JournalAlreadyFormattedError(
                f"journal {self.jid}: {self._j.storage.where} already holds data; not formatting it from its "
                f"peers", jid=self.jid)
        self._j._format(ns_info, promised_epoch, rejoin_txid)
        log.warning("journal %s: formatted from its peers with %s, promised epoch %d; takes no part in "
                    "elections or recoveries until it holds every finalized txid through %d again",
                    self.jid, ns_info, promised_epoch, rejoin_txid)

    @one_at_a_time
    def finish_rejoin(self, first_needed: int) -> bool:
        """Drop the rejoin marker once the finalized segments cover ``first_needed`` .. the rejoin
        txid (``sync_rules.rejoin_complete``). Returns whether the node may vote."""
        if self._j.rejoin_txid is None:
            return True
        local = self._local_segments()
        if not sync_rules.rejoin_complete(local.finalized.values(), self._j.rejoin_txid,
                                          max(first_needed, self._j.purged_below)):
            return False
        self._j.storage.delete(REJOIN_TXID)
        self._j.storage.sync_dir()
        log.info("journal %s: holds every finalized txid through %d again; votes again", self.jid,
                 self._j.rejoin_txid)
        self._j.rejoin_txid = None
        return True

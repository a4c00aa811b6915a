"""Violations the simulator found that are attributed to known, reported bugs.

Why: a bug found by the simulator in another part stays in the soak counts
(docs/testing.md) until its owner fixes it, but it must not hide *new* bugs.
Each known bug has a precise attribution rule that looks at the history (not
at message text alone), so a different bug with a similar symptom is not
swallowed. The fixed-seed test fails on any violation that is not attributed;
``tests/sim/test_known_bugs.py`` pins one seed per bug with a strict xfail, so
the fix of a bug is noticed (the xfail starts passing) and its entry here can
be deleted.

Known bugs (see the final report and docs/testing.md):

* ``KB1 finalize-unsynced`` (journalnode/journal.py): a batch whose txids are
  all known committed is appended without fsync (HDFS-3885, a lagging node);
  ``finalize_log_segment`` renames the in-progress file without syncing it
  first. A crash then tears, zeroes or shortens a *finalized* segment on that
  node, so finalized copies of one segment differ (seed 000 §2.7 invariant 1/3).
  The same root cause has a second face: ``accept_recovery`` that needs no
  download (the local copy has the chosen length) persists the paxos decision
  over a copy whose lagging batches are not durable; a crash empties the copy
  and every later ``prepare_recovery`` on that node fails with
  ``InvariantViolation`` ("paxos data says segment ... but the on-disk segment
  is None"): the node can never take part in that recovery again.
  Attribution: a finalize rule violation on a node/segment for which the
  simulated disk saw a rename to the finalized name while bytes were unsynced,
  or a failed final read whose only replica was such a torn copy, or that
  paxos failure on a node whose kept copy had unsynced bytes at accept time.
* ``KB2 accept-committed-check`` (journalnode/journal.py with the client's
  committed-txid piggy-back): a late ``accept_recovery`` from the new writer
  reaches a node after that writer already committed txid N in a *newer*
  segment; the node compares that N with the txids of the old writer's
  in-progress segment under recovery and raises ``InvariantViolation ("would
  discard already-committed txn N")``, though N belongs to another history.
  Attribution: that exact failure raised by a JournalNode.
* ``KB3 accept-same-length`` (journalnode/journal.py ``accept_recovery_plan``;
  also Hadoop): a node holds an in-progress copy of segment S written by an
  older writer (never acked), a newer writer skipped S (its new-epoch quorum
  had S empty or absent) and rewrote txids from S on a quorum. The recovery
  that follows chooses the newer copy; a node whose old copy happens to have
  the *same end txid* skips the download ("already have the same length") and
  finalizes different bytes: two finalized copies of S differ and readers can
  see different bytes for one txid (requirement 4). Seed 000 §2.8 transmits an
  md5 of the segment with its length; the fix is to compare content (or the
  writer epoch of the copy), not only the end txid.
  Attribution: a finalize rule violation on a segment for which the
  simulated shell observed accept_recovery keeping, on some node, a copy whose
  records differ from the chosen source's (an oracle look at both disks); the
  final reader may have read that copy, so good copies then differ from it;
  or an acked/read txid in such a segment seen with other bytes by a reader
  (the reader was served the kept copy: an acknowledged edit "changed").
"""

from __future__ import annotations

import re

from qjournal.protocol.segment import segment_file_name
from qjournal.sim.checker import Violation
from qjournal.sim.history import Failure, History, NodeSegment, Note

__all__ = ["KNOWN_BUGS", "attribute"]

KNOWN_BUGS = {
    "KB3": "accept-same-length: accept_recovery keeps a local copy of the chosen length without "
           "comparing contents (seed 000 §2.8 transmits an md5; Hadoop and we do not)",
    "KB1": "finalize-unsynced: finalize renames a segment holding unsynced (lagging) batches",
    "KB2": "accept-committed-check: a late accept_recovery compares a committed txid of a newer "
           "segment with the old segment's txids",
}


def attribute(history: History, violations: list[Violation]) -> tuple[list[Violation], dict[str, int]]:
    """Split violations into unexplained ones and counts per known bug.

    Args:
        history: the run's history.
        violations: what the checker found.

    Returns:
        ``(unexplained, {bug id: count})``.
    """
    unsynced: set[tuple[str, str]] = set()
    for n in history.of(Note):
        if n.kind == "finalize_unsynced":
            unsynced.add((n.node, n.detail.split(" -> ")[0]))
    accept_unsynced: set[tuple[str, int]] = set()
    for n in history.of(Note):
        if n.kind == "accept_unsynced":
            accept_unsynced.add((n.node, int(n.detail.split()[1])))
    kept_different: set[tuple[str, int]] = set()
    kept_ranges: list[tuple[int, int]] = []
    for n in history.of(Note):
        if n.kind == "accept_kept_different":
            parts = n.detail.split()
            kept_different.add((n.node, int(parts[1])))
            kept_ranges.append((int(parts[1]), int(parts[2])))
    unexplained: list[Violation] = []
    known: dict[str, int] = {}
    for v in violations:
        bug = None
        if v.rule in ("finalize_disagree", "finalized_vs_log"):
            for seq in v.seqs:
                e = history.events[seq]
                if isinstance(e, NodeSegment) and (e.node, segment_file_name(e.start_txid)) in unsynced:
                    bug = "KB1"
                elif isinstance(e, NodeSegment) and e.start_txid in {s for _, s in kept_different}:
                    bug = "KB3"  # the kept copy, or a good copy judged against a log read from it
        elif v.rule in ("acked_lost", "read_lost", "read_disagree"):
            m = re.match(r"txid (\d+) ", v.message)
            if m and any(a <= int(m.group(1)) <= b for a, b in kept_ranges):
                bug = "KB3"  # a reader was served the kept copy with the old writer's bytes
        elif v.rule == "failure" and len(v.seqs) == 1:
            e = history.events[v.seqs[0]]
            if isinstance(e, Failure) and e.who.startswith("jn") and \
                    e.error_type == "InvariantViolation" and "would discard already-committed txn" in e.message:
                bug = "KB2"
            elif isinstance(e, Failure) and e.error_type == "InvariantViolation" and any(
                    (node == e.who or node in e.message)
                    and f"paxos data says segment [{start}-" in e.message
                    for node, start in sorted(accept_unsynced)):
                bug = "KB1"  # the paxos decision outlived the unsynced copy it was made over
            elif isinstance(e, Failure) and e.error_type == "NoRead":
                # the final read failed on a replica whose finalized copy KB1 tore
                for node, fname in sorted(unsynced):
                    start = int(fname.rsplit("_", 1)[1])
                    if f"segment {start}-" in e.message and f"{node}: CorruptSegmentError" in e.message:
                        bug = "KB1"
        if bug is None:
            unexplained.append(v)
        else:
            known[bug] = known.get(bug, 0) + 1
    return unexplained, dict(sorted(known.items()))

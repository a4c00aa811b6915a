"""Violations the simulator found that are attributed to known, reported bugs.

Why: a bug found by the simulator in another part stays in the soak counts
(docs/testing.md) until its owner fixes it, but it must not hide *new* bugs.
Each known bug has a precise attribution rule that looks at the history (not
at message text alone), so a different bug with a similar symptom is not
swallowed. The fixed-seed test fails on any violation that is not attributed;
each open bug is pinned by a strict xfail that searches a window of seeds for
it, so its fix is noticed (the xfail starts passing) and its entry here is
then deleted.

Known bugs: none open. Found by the simulator and fixed by their owners (the
attribution rules were deleted with the fix, so a regression now fails the
fixed-seed tests; tests/sim/test_regressions.py replays the runs that showed
them; docs/testing.md tells each story):

* ``KB1 finalize-unsynced`` (journalnode/journal.py): lagging batches appended
  without fsync were renamed into a finalized segment / had paxos data
  persisted over them; a crash then tore or emptied the finalized copy.
  Fixed in bcd1086.
* ``KB2 accept-committed-check``: a late ``accept_recovery`` compared a
  committed txid of a newer segment with the old segment under recovery and
  raised ``InvariantViolation``. Fixed in 232dc0e (client) and bcd1086 (node).
* ``KB3 accept-same-length``: ``accept_recovery`` kept a local copy of the
  chosen length without comparing contents; finalized copies differed and a
  reader could see other bytes for an acknowledged txid. Fixed in bcd1086
  (segment digest in ``SegmentState``).

To pin a new bug: add an entry to :data:`KNOWN_BUGS`, an attribution rule in
:func:`attribute` that looks at the history (``Note`` events recorded by the
simulated world are the precise way), and a strict xfail in
tests/sim/test_known_bugs.py that searches a bounded window of seeds for it.
"""

from __future__ import annotations

from qjournal.sim.history import History, Violation

__all__ = ["KNOWN_BUGS", "attribute"]

#: bug id -> one-line description (none open)
KNOWN_BUGS: dict[str, str] = {}


def attribute(history: History, violations: list[Violation]) -> tuple[list[Violation], dict[str, int]]:
    """Split violations into unexplained ones and counts per known bug.

    Args:
        history: the run's history (its ``Note`` events are the evidence).
        violations: what the checker found.

    Returns:
        ``(unexplained, {bug id: count})``; with no open bug, every violation is unexplained.
    """
    del history  # no open bug to attribute
    return list(violations), {}

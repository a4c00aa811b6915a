"""The journal's one-call-at-a-time rule is enforced in code (issue 26): a call of a journal from a second
thread while another call of it runs is a broken invariant, raised before it touches anything; the two
documented exceptions (``get_journaled_edits``, ``finalized_digest``) run beside it; one thread may nest
calls."""

from __future__ import annotations

import os
import threading

import pytest

from qjournal.errors import CacheMissError, InvariantViolation
from qjournal.journalnode.disk_storage import DiskJournalStorage
from qjournal.journalnode.journal import Journal

from .jn_helpers import NS

JID = "rule"


def test_a_second_thread_inside_a_journal_is_a_broken_invariant(tmp_path):
    inside, release = threading.Event(), threading.Event()

    def hook(point):
        if point == "after_promise":  # new_epoch holds the journal here until released
            inside.set()
            assert release.wait(10), "the test never released the first call"
    j = Journal(JID, DiskJournalStorage(os.path.join(str(tmp_path), JID), fsync=False), fault_hook=hook)
    j.format(NS)  # the same thread nests has_some_data inside format: allowed
    errors: list[BaseException] = []

    def first():
        try:
            j.new_epoch(NS, 1)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors.append(e)
    t = threading.Thread(target=first)
    t.start()
    try:
        assert inside.wait(10), "new_epoch never reached its promise"
        with pytest.raises(InvariantViolation, match=r"journal rule: is_formatted .* while new_epoch runs"):
            j.is_formatted()
        with pytest.raises(InvariantViolation, match="one call at a time"):
            j.sync.sync_plan(None)  # the sync installer shares the journal's rule
        # the two documented exceptions run beside the call
        with pytest.raises(CacheMissError):
            j.get_journaled_edits(1, 10, 1 << 20)  # (the edit cache is off here)
        assert j.sync.finalized_digest(1, 5) is None
    finally:
        release.set()
        t.join(10)
    assert errors == [] and j.last_promised_epoch == 1
    assert j.is_formatted()  # the rule is free again once the first call returned
    j.close()

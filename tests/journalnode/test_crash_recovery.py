"""Restart after a crash at every storage step of a scripted journal history.

The history covers the write path (start, journal, finalize), a new epoch, the
recovery path (prepare, accept with a download, finalize) and purge. For every
storage step ``i`` and every way the unsynced tail may survive (lost, kept,
torn), the node is "powered off" at step ``i`` (see ``crash_storage.py``) and
reopened. The reopened Journal must open, keep every promise and every
acknowledged txn, answer prepare-recovery without tripping an invariant, and
let a new writer recover, finalize and go on writing. Deterministic: no seed.
"""

import pytest

from qjournal.journalnode.journal import Journal
from qjournal.protocol.messages import SegmentState
from qjournal.protocol.segment import encode_header, iter_records, parse_segment_file_name, scan_segment

from .crash_storage import Crash, CrashStorage
from .jn_helpers import NS, Writer, batch, commit_download

JID = "crashj"


def body(t):
    return bytes([t % 251]) * 10


def script():
    """(label, fn(journal, writers), acked txids or None) in order."""
    w = {}

    def new_epoch(e):
        def f(j):
            j.new_epoch(NS, e)
            w[e] = Writer(JID, e)
        return f

    def accept(j):
        plan = j.accept_recovery_plan(w[2].req(), SegmentState(7, 10, True))
        commit_download(j, plan, encode_header(1) + batch(7, 4))

    return [
        ("format", lambda j: j.format(NS), ()),
        ("new_epoch 1", new_epoch(1), ()),
        ("start 1", lambda j: j.start_log_segment(w[1].req(), 1, 1), ()),
        ("journal 1-3", lambda j: j.journal(w[1].req(), 1, 1, 3, batch(1, 3)), range(1, 4)),
        ("journal 4-6", lambda j: j.journal(w[1].req(), 1, 4, 3, batch(4, 3)), range(4, 7)),
        ("finalize 1-6", lambda j: j.finalize_log_segment(w[1].req(), 1, 6), ()),
        ("start 7", lambda j: j.start_log_segment(w[1].req(), 7, 1), ()),
        ("journal 7-8", lambda j: j.journal(w[1].req(committed=6), 7, 7, 2, batch(7, 2)), range(7, 9)),
        ("new_epoch 2", new_epoch(2), ()),
        ("prepare 7", lambda j: j.prepare_recovery(w[2].req(), 7), ()),
        ("accept 7-10", accept, range(7, 11)),
        ("finalize 7-10", lambda j: j.finalize_log_segment(w[2].req(), 7, 10), ()),
        ("start 11", lambda j: j.start_log_segment(w[2].req(), 11, 1), ()),
        ("journal 11", lambda j: j.journal(w[2].req(committed=10), 11, 11, 1, batch(11, 1)), range(11, 12)),
        ("purge 7", lambda j: j.purge_logs_older_than(w[2].req(), 7), ()),
    ]


def run_until_crash(crash_at, preallocate=0):
    st = CrashStorage(crash_at, preallocate)
    acked = []
    j = Journal(JID, st)
    for label, fn, _txids in script():
        try:
            fn(j)
        except Crash:
            return st, acked, label
        acked.append(label)
    return st, acked, None


def total_steps():
    st, acked, crashed = run_until_crash(None)
    assert crashed is None and len(acked) == len(script())
    return st.steps


def txns_on_disk(st):
    """txid -> body over every segment file's valid prefix (finalized files must be clean)."""
    out = {}
    for name in st.list_files():
        seg = parse_segment_file_name(name)
        if seg is None:
            continue
        data = st.read(name)
        res = scan_segment(data, expected_first_txid=seg.start_txid)
        if not seg.in_progress:
            assert res.clean and res.last_txid == seg.end_txid, (name, res)
        for rec in iter_records(memoryview(data)[:res.valid_length]):
            out.setdefault(rec.txid, rec.body)
    return out


N_STEPS = total_steps()


@pytest.mark.parametrize("preallocate", [0, 64], ids=["appended", "preallocated"])
@pytest.mark.parametrize("tail", ["none", "all", "torn"])
@pytest.mark.parametrize("crash_at", range(N_STEPS))
def test_restart_after_crash(crash_at, tail, preallocate):
    st, acked, crashed = run_until_crash(crash_at, preallocate)
    assert crashed is not None, f"step {crash_at} was not reached"
    disk = st.reboot(tail)
    j = Journal(JID, disk)  # must open
    ctx = (f"crash at step {crash_at} during {crashed!r} (tail {tail}, preallocated {preallocate} bytes), "
           f"acked {acked}")
    done = set(acked)
    if "format" in done:
        assert j.is_formatted(), ctx
    if not j.is_formatted():
        assert "format" not in done
        return
    if "new_epoch 2" in done:
        assert j.last_promised_epoch >= 2, ctx
    elif "new_epoch 1" in done:
        assert j.last_promised_epoch >= 1, ctx
    if "start 11" in done:
        assert j.last_writer_epoch == 2, ctx
    elif "start 1" in done:
        assert j.last_writer_epoch >= 1, ctx
    # every acknowledged txn is there, byte for byte
    on_disk = txns_on_disk(disk)
    purging = "purge 7" in done or crashed == "purge 7"  # purge may delete segments below 7
    for label, _fn, txids in script():
        if label in done:
            for t in txids:
                if not (purging and t < 7):
                    assert on_disk.get(t) == body(t), f"txid {t} lost; {ctx}"
    if "finalize 1-6" in done and not purging:
        assert SegmentState(1, 6, False) in j.get_edit_log_manifest(1, False).segments, ctx
    # a new writer can recover the newest segment and go on
    epoch = j.last_promised_epoch + 1
    last_seg = j.new_epoch(NS, epoch).last_segment_txid
    w = Writer(JID, epoch)
    next_txid = 1
    if last_seg is not None:
        resp = j.prepare_recovery(w.req(), last_seg)
        state = resp.segment_state
        assert state is not None, ctx
        if "accept 7-10" in done and last_seg == 7:
            assert state.end_txid == 10, ctx
            if state.in_progress:
                assert resp.accepted_in_epoch == 2, ctx
        if state.in_progress:
            plan = j.accept_recovery_plan(w.req(), state)
            assert not plan.download, ctx
            commit_download(j, plan, None)
        j.finalize_log_segment(w.req(), state.start_txid, state.end_txid)
        next_txid = state.end_txid + 1
    j.start_log_segment(w.req(), next_txid, 1)
    j.journal(w.req(), next_txid, next_txid, 2, batch(next_txid, 2))
    j.finalize_log_segment(w.req(), next_txid, next_txid + 1)
    assert txns_on_disk(disk)[next_txid + 1] == body(next_txid + 1)
    j.close()

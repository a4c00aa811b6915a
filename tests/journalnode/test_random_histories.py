"""Seeded random histories against one Journal on the crash-modelling storage.

Several writers with different epochs race: each step is a random call (new epoch,
start, journal, finalize, heartbeat, prepare/accept of the newest segment) or a power
cut followed by a reopen. After every step the checker asserts the acceptor's safety
properties:

1. the durable promise never decreases, and no call from an epoch lower than a
   promise already acknowledged is accepted;
2. the last writer epoch never exceeds the promise;
3. every txid acknowledged by ``journal`` is still on disk with the same bytes after
   any number of crashes (until a later accepted recovery or segment start replaces
   it), and no two segments ever give one txid different bodies;
4. reopening never fails and never trips an invariant.

A failure prints its seed; rerun one with ``QJ_SEED=<seed>``.
"""

import os
import random

import pytest

from qjournal.errors import InvariantViolation, QJournalError
from qjournal.journalnode.journal import Journal
from qjournal.protocol.messages import RequestInfo, SegmentState
from qjournal.protocol.segment import OP_DATA, encode_header, encode_records, iter_records, \
    parse_segment_file_name, scan_segment

from .crash_storage import Crash, CrashStorage
from .jn_helpers import NS, commit_download

JID = "randj"
SEEDS = [int(os.environ["QJ_SEED"])] if os.environ.get("QJ_SEED") else list(range(120))


def body(epoch, t):
    return b"e%d-t%d" % (epoch, t)


class WriterModel:
    def __init__(self, epoch):
        self.epoch = epoch
        self.serial = 0
        self.seg = None
        self.next = None

    def req(self, committed=-12345):
        self.serial += 1
        return RequestInfo(JID, self.epoch, self.serial, committed)


def disk_txns(st):
    out = {}
    for name in st.list_files():
        seg = parse_segment_file_name(name)
        if seg is None:
            continue
        data = st.read(name)
        res = scan_segment(data, expected_first_txid=seg.start_txid)
        for rec in iter_records(memoryview(data)[:res.valid_length]):
            prev = out.get(rec.txid)
            assert prev is None or prev == rec.body, f"txid {rec.txid} has two bodies"
            out[rec.txid] = rec.body
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_random_history(seed):
    print("seed", seed)
    rng = random.Random(seed)
    st = CrashStorage()
    j = Journal(JID, st)
    j.format(NS)
    acked_promise = 0
    acked = {}          # txid -> body acknowledged by journal / accept
    writers = []
    for step in range(60):
        what = rng.choice(["new_epoch", "start", "journal", "journal", "journal", "finalize",
                           "heartbeat", "recover", "crash"])
        w = rng.choice(writers) if writers else None
        try:
            if what == "new_epoch":
                e = j.last_promised_epoch + rng.choice([0, 1, 1, 2])
                j.new_epoch(NS, e)
                acked_promise = max(acked_promise, e)
                writers.append(WriterModel(e))
            elif what == "crash":
                st.crash_at = st.steps + rng.randrange(0, 6)
                try:
                    if w is not None and w.seg is not None:
                        n = rng.randint(1, 3)
                        recs = encode_records([(t, OP_DATA, body(w.epoch, t)) for t in range(w.next, w.next + n)])
                        j.journal(w.req(), w.seg, w.next, n, recs)
                        for t in range(w.next, w.next + n):
                            acked[t] = body(w.epoch, t)
                        w.next += n
                except (Crash, QJournalError):
                    pass
                st = st.reboot(rng.choice(["none", "all", "torn"]))
                j = Journal(JID, st)
                for x in writers:
                    x.seg = None  # the open segment does not survive a restart
            elif w is None:
                continue
            elif what == "start":
                txid = max([1] + [t + 1 for t in sorted(acked)])
                j.start_log_segment(w.req(), txid, 1)
                w.seg, w.next = txid, txid
            elif what == "journal":
                if w.seg is None:
                    continue
                n = rng.randint(1, 4)
                recs = encode_records([(t, OP_DATA, body(w.epoch, t)) for t in range(w.next, w.next + n)])
                j.journal(w.req(), w.seg, w.next, n, recs)
                for t in range(w.next, w.next + n):
                    acked[t] = body(w.epoch, t)
                w.next += n
            elif what == "finalize":
                if w.seg is None or w.next == w.seg:
                    continue
                j.finalize_log_segment(w.req(), w.seg, w.next - 1)
                w.seg = None
            elif what == "heartbeat":
                j.heartbeat(w.req())
            elif what == "recover":
                segs = j.get_edit_log_manifest(0, True).segments
                if not segs or not segs[-1].in_progress:
                    continue
                resp = j.prepare_recovery(w.req(), segs[-1].start_txid)
                state = resp.segment_state
                if state is None or not state.in_progress:
                    continue
                # accept a possibly shorter value: the txns past it are no longer acknowledged
                end = rng.randint(state.start_txid, state.end_txid)
                data = st.read(f"edits_inprogress_{state.start_txid:019d}")
                plan = j.accept_recovery_plan(w.req(), SegmentState(state.start_txid, end, True))
                commit_download(j, plan, data if plan.download else None)
                for t in [t for t in acked if t > end]:
                    del acked[t]
                for x in writers:
                    x.seg = None
            if what in ("start", "journal", "finalize", "heartbeat", "recover"):
                # the call went through: its epoch must not be below a promise already given
                assert w.epoch >= acked_promise, \
                    f"seed {seed} step {step}: {what} of epoch {w.epoch} accepted after promise {acked_promise}"
                acked_promise = max(acked_promise, w.epoch)
        except InvariantViolation:
            raise
        except QJournalError:
            pass  # refusals are fine; the checks below say whether state stayed safe
        # --- invariants -------------------------------------------------------------
        assert j.last_promised_epoch >= acked_promise, f"seed {seed} step {step}: promise went back"
        assert j.last_writer_epoch <= j.last_promised_epoch, f"seed {seed} step {step}"
        on_disk = disk_txns(st)
        for t, b in sorted(acked.items()):
            assert on_disk.get(t) == b, f"seed {seed} step {step} ({what}): acked txid {t} lost"
    j.close()

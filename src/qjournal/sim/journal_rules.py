"""The quorum journal's rules: what the writers, readers and JournalNodes of a history may show.

Why separate from the workloads: a checker that shares the workload's state can
share its bugs. These rules see only observed events and know only PRODUCT.md
(seed 000 §1.3.2) and HDFS-3077 §2.7. Pure: no asyncio, no I/O, no clock, no
randomness; tested on hand-made histories. :func:`qjournal.sim.checker.check`
applies them, with the whole cluster's rules, to every history.

Rules checked (each violation names its rule):

1. ``acked_lost``: every txid a writer wrote up to an ``Acked`` txid is in the
   final log with the bytes that writer wrote.
2. ``read_lost``: every txid a reader saw is in the final log with the same bytes.
3. ``read_disagree``: every reader that read a txid got the same bytes.
4. ``invented``: every txid in the final log carries bytes some writer wrote
   for that txid (recovery never invents or mixes data; "recovered <= max
   attempted", reference §6.4).
5. ``epoch_reused``: no node promises the same epoch twice, no epoch is held
   (promised by a quorum) by two writers, and no epoch is granted to two
   writers. (Two writers may each get *some* promises for the same epoch
   when they race: only one of them can reach a quorum.)
6. ``epoch_not_increasing``: a writer started after another writer was
   granted epoch E gets an epoch greater than E. (Recoveries may *finish* in
   any order; and an older epoch may even complete a quorum of promises after
   a newer one, since promises only fence: rule 7 is what makes that harmless.)
7. ``two_writers``: once a quorum of nodes promised epoch E, no batch of an
   older epoch is accepted by a quorum of nodes *all after that moment*
   (quorum intersection makes that impossible if every node keeps its promise).
8. ``finalize_disagree``: every finalization of a segment start names the same
   end txid, and finalized files with the same start are byte-identical on
   every node at the end (§2.7 invariant 1 and 3).
9. ``finalized_vs_log``: every record of a finalized segment on any node equals
   the final log at that txid (no committed txid ever discarded or replaced);
   a finalized segment that does not decode is also a violation.
10. ``failure``: a writer or reader saw an error that is never an expected
    fault outcome (``InvariantViolation``, an unexpected exception type).
"""

from __future__ import annotations

from typing import Iterator

from qjournal.errors import CorruptRecordError, CorruptSegmentError
from qjournal.protocol.segment import OP_DATA, decode_header, iter_records
from qjournal.sim.history import (Accepted, Acked, EpochGranted, Failure, FinalLog, Finalized,
                                  History, NodeSegment, Promise, Read, Setup, Violation, Written,
                                  WriterStarted)

__all__ = ["JOURNAL_RULES", "journal_violations"]

JOURNAL_RULES = ["acked_lost", "read_lost", "read_disagree", "invented", "epoch_reused",
                 "epoch_not_increasing", "two_writers", "finalize_disagree", "finalized_vs_log", "failure"]


def journal_violations(history: History) -> Iterator[Violation]:
    """Every violation of the rules of the module docstring, rule by rule (unlimited, unsorted).

    Rule 7 needs a ``Setup`` event, rules 1, 2, 4 and 9 a ``FinalLog``; a history without
    them (a whole-cluster chaos run) is judged by the rest.
    """
    for rule_fn in (_check_log, _check_reads, _check_epochs, _check_two_writers, _check_finalized,
                    _check_failures):
        yield from rule_fn(history)


# -- helpers ----------------------------------------------------------------------

def _final(history: History) -> tuple[dict[int, bytes], FinalLog | None]:
    finals = history.of(FinalLog)
    if not finals:
        return {}, None
    last = finals[-1]
    return {last.first_txid + i: body for i, body in enumerate(last.records)}, last


def _written_by_writer(history: History) -> dict[str, dict[int, Written]]:
    out: dict[str, dict[int, Written]] = {}
    for e in history.of(Written):
        out.setdefault(e.writer, {})[e.txid] = e
    return out


# -- rules 1 and 4 ----------------------------------------------------------------

def _check_log(history: History):
    final, final_ev = _final(history)
    if final_ev is None:
        return
    written = _written_by_writer(history)
    # rule 1: acked never lost
    for ack in history.of(Acked):
        mine = written.get(ack.writer, {})
        for txid in sorted(t for t in mine if t <= ack.txid):
            w = mine[txid]
            got = final.get(txid)
            if got is None:
                yield Violation("acked_lost", f"txid {txid} acked to writer {ack.writer} "
                                f"(epoch {ack.epoch}) is missing from the final log", (w.seq, ack.seq, final_ev.seq))
                break
            if got != w.data:
                yield Violation("acked_lost", f"txid {txid} acked to writer {ack.writer} "
                                f"(epoch {ack.epoch}) has different bytes in the final log",
                                (w.seq, ack.seq, final_ev.seq))
                break
    # rule 4: nothing invented
    by_txid: dict[int, list[Written]] = {}
    for e in history.of(Written):
        by_txid.setdefault(e.txid, []).append(e)
    for txid in sorted(final):
        cands = by_txid.get(txid, [])
        if not any(w.data == final[txid] for w in cands):
            yield Violation("invented", f"final log holds txid {txid} with bytes no writer wrote "
                            f"for it ({len(cands)} writes of that txid seen)",
                            tuple(w.seq for w in cands) + (final_ev.seq,))


# -- rules 2 and 3 ----------------------------------------------------------------

def _check_reads(history: History):
    final, final_ev = _final(history)
    first_read: dict[int, Read] = {}
    for r in history.of(Read):
        prev = first_read.setdefault(r.txid, r)
        if prev.data != r.data:
            yield Violation("read_disagree", f"txid {r.txid}: reader {prev.reader} and reader "
                            f"{r.reader} got different bytes", (prev.seq, r.seq))
        if final_ev is not None:
            got = final.get(r.txid)
            if got is None:
                yield Violation("read_lost", f"txid {r.txid} read by {r.reader} is missing from "
                                f"the final log", (r.seq, final_ev.seq))
            elif got != r.data:
                yield Violation("read_lost", f"txid {r.txid} read by {r.reader} has different "
                                f"bytes in the final log", (r.seq, final_ev.seq))


# -- rules 5 and 6 ----------------------------------------------------------------

def _check_epochs(history: History):
    setups = history.of(Setup)
    quorum = len(setups[-1].nodes) // 2 + 1 if setups else None
    # a node never promises the same epoch twice (jn_rules invariant 5)
    by_node: dict[tuple[str, int], Promise] = {}
    # an epoch is *held* by a writer once a quorum of nodes promised it to that writer
    promisers: dict[tuple[int, str], list[Promise]] = {}
    holder: dict[int, Promise] = {}
    for p in history.of(Promise):
        prev = by_node.setdefault((p.node, p.epoch), p)
        if prev is not p:
            yield Violation("epoch_reused", f"node {p.node} promised epoch {p.epoch} twice (to "
                            f"{prev.writer} and to {p.writer})", (prev.seq, p.seq))
        got = promisers.setdefault((p.epoch, p.writer), [])
        if p.node not in [q.node for q in got]:
            got.append(p)
        if quorum is not None and len(got) == quorum:
            first = holder.setdefault(p.epoch, p)
            if first.writer != p.writer:
                yield Violation("epoch_reused", f"epoch {p.epoch} held (promised by a quorum) by "
                                f"writer {first.writer} and by writer {p.writer}", (first.seq, p.seq))
    granted: dict[int, EpochGranted] = {}
    for g in history.of(EpochGranted):
        prev = granted.setdefault(g.epoch, g)
        if prev.writer != g.writer:
            yield Violation("epoch_reused", f"epoch {g.epoch} granted to writers {prev.writer} "
                            f"and {g.writer}", (prev.seq, g.seq))
    # a writer started after another writer was granted its epoch gets a larger epoch
    started = {w.writer: w for w in history.of(WriterStarted)}
    grants = history.of(EpochGranted)
    for g in grants:
        s = started.get(g.writer)
        if s is None:
            continue
        before = [a for a in grants if a.seq < s.seq and a.writer != g.writer]
        if before:
            top = max(before, key=lambda a: (a.epoch, -a.seq))
            if g.epoch <= top.epoch:
                yield Violation("epoch_not_increasing", f"writer {g.writer} started after writer "
                                f"{top.writer} was granted epoch {top.epoch}, yet got epoch {g.epoch}",
                                (top.seq, s.seq, g.seq))


# -- rule 7 -----------------------------------------------------------------------

def _check_two_writers(history: History):
    setups = history.of(Setup)
    if not setups:
        return
    quorum = len(setups[-1].nodes) // 2 + 1
    # moment (seq) at which a quorum of nodes had promised >= E, for every promised E
    promised: dict[str, int] = {}
    fenced_at: dict[int, Promise] = {}
    for p in history.of(Promise):
        promised[p.node] = max(promised.get(p.node, 0), p.epoch)
        for epoch in sorted(set(promised.values())):
            if epoch in fenced_at:
                continue
            if sum(1 for n in sorted(promised) if promised[n] >= epoch) >= quorum:
                fenced_at[epoch] = p
    if not fenced_at:
        return
    accepted = history.of(Accepted)
    for epoch in sorted(fenced_at):
        moment = fenced_at[epoch]
        # batches of older epochs accepted after the moment, by txid -> nodes
        late: dict[tuple[int, int], dict[str, Accepted]] = {}
        for a in accepted:
            if a.seq <= moment.seq or a.epoch >= epoch:
                continue
            for txid in range(a.first_txid, a.last_txid + 1):
                late.setdefault((a.epoch, txid), {}).setdefault(a.node, a)
        for (old_epoch, txid) in sorted(late):
            nodes = late[(old_epoch, txid)]
            if len(nodes) >= quorum:
                yield Violation(
                    "two_writers",
                    f"txid {txid} of epoch {old_epoch} was accepted by a quorum "
                    f"{sorted(nodes)} after a quorum promised epoch {epoch}",
                    (moment.seq,) + tuple(nodes[n].seq for n in sorted(nodes)))
                break


# -- rules 8 and 9 ----------------------------------------------------------------

def _check_finalized(history: History):
    ends: dict[int, Finalized] = {}
    for f in history.of(Finalized):
        prev = ends.setdefault(f.start_txid, f)
        if prev.end_txid != f.end_txid:
            yield Violation("finalize_disagree", f"segment {f.start_txid} finalized ending at "
                            f"{prev.end_txid} on {prev.node} and at {f.end_txid} on {f.node}",
                            (prev.seq, f.seq))
    final, final_ev = _final(history)
    seen: dict[int, NodeSegment] = {}
    for s in history.of(NodeSegment):
        if s.in_progress:
            continue
        prev = seen.setdefault(s.start_txid, s)
        if prev.data != s.data or prev.end_txid != s.end_txid:
            yield Violation("finalize_disagree", f"finalized segment {s.start_txid} differs "
                            f"between {prev.node} (end {prev.end_txid}) and {s.node} (end "
                            f"{s.end_txid})", (prev.seq, s.seq))
        if final_ev is None:
            continue
        try:
            decode_header(s.data, where=f"{s.node}:{s.start_txid}")
            records = list(iter_records(s.data, where=f"{s.node}:{s.start_txid}",
                                        allow_torn_tail=False))
        except (CorruptRecordError, CorruptSegmentError) as e:
            yield Violation("finalized_vs_log", f"finalized segment {s.start_txid}-{s.end_txid} on "
                            f"{s.node} does not decode: {e}", (s.seq,))
            continue
        txids = [r.txid for r in records if r.opcode == OP_DATA]
        if not records or records[0].txid != s.start_txid or records[-1].txid != s.end_txid:
            held = f"txids {records[0].txid}..{records[-1].txid}" if records else "no record"
            yield Violation("finalized_vs_log", f"finalized segment {s.start_txid}-{s.end_txid} on "
                            f"{s.node} holds {held}", (s.seq,))
        for r in records:
            if r.opcode != OP_DATA:
                continue
            got = final.get(r.txid)
            if got is not None and got != r.body:
                yield Violation("finalized_vs_log", f"txid {r.txid} in finalized segment "
                                f"{s.start_txid} on {s.node} differs from the final log",
                                (s.seq, final_ev.seq))
                break
        missing = [t for t in txids if t not in final]
        if missing and final:
            lo = min(final)
            real_missing = [t for t in missing if t >= lo]
            if real_missing:
                yield Violation("finalized_vs_log", f"txids {real_missing[:5]} of finalized segment "
                                f"{s.start_txid} on {s.node} are missing from the final log",
                                (s.seq, final_ev.seq))


# -- rule 10 ----------------------------------------------------------------------

def _check_failures(history: History):
    for f in history.of(Failure):
        yield Violation("failure", f"{f.who} failed with {f.error_type}: {f.message}", (f.seq,))

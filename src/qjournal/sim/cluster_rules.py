"""The whole cluster's rules: what the clients' namespace operations in a history may show.

Why apart from :mod:`qjournal.sim.journal_rules` (the quorum journal's log): the
whole cluster is judged by what its *clients* were told and saw (PRODUCT.md,
correctness requirements 5-8), and by what each NameNode held at the end; the
journal rules still apply underneath, on the same history, through the one entry
point :func:`qjournal.sim.checker.check`. Pure: no asyncio, no I/O, no clock;
tested on hand-made histories. It trusts nothing of the system under test but
observed events.

The workload it judges (``qjournal.sim.ha_workload``) keeps each client in
its own directory and gives each path a short, simple life, so the expected
namespace follows from the events alone: a path is created once (``mkdirs`` or
``create``), then at most renamed away or deleted; a client touches a path again
only after its previous operation on it was acknowledged. Operations of one
client are sequential.

Rules (each violation names its rule):

1. ``op_lost``: an operation a client saw acknowledged is not in the final
   namespace of the active (a created path missing, a deleted or renamed-away
   path still there).
2. ``op_invented``: the final namespace holds a path of a client's directory that
   no operation of that client could have created.
3. ``not_once``: a retried operation was applied twice: the client got the error
   a second application gives (a fresh path "already exists", an existing path
   "not found" for its delete or rename, a delete answering False).
4. ``ack_not_durable``: a NameNode answered a write although no quorum of
   JournalNodes had accepted, at that NameNode's epoch, the edits up to the txid
   its edit log called synced (requirement 6, with the journal rules'
   ``two_writers``: no edit of an older epoch reaches a quorum once a newer epoch
   holds one, so every acknowledged edit is one the newer active recovers. An
   answer that a paused old active delivers late, for an edit a quorum accepted
   before the takeover, is not a violation: no system can keep a paused process
   from finishing a reply, and that edit is in the new active's namespace).
5. ``read_lost``: a client read that a path exists, and it is later gone without
   an acknowledged delete or rename by its owner (requirement 7).
6. ``read_stale``: a client read a state older than one it had already seen: an
   operation acknowledged before the read began not visible, or a path it saw
   exist absent again with no acknowledged operation in between (requirement 7).
   A read answered by the active (read barrier) or by an observer after an
   ``msync`` for this read reflects every write acknowledged before it began, so
   every such operation binds it. A *session-only* read (an observer answering
   with only the client's own state id, HDFS-12943) is bound by the reader's own
   acknowledged operations (read-your-writes) and by what it read before
   (monotonic reads, the second half); another client's path may show any state
   it had before the read's answer.
7. ``standby_diverged``: a standby or an observer that applied as many
   transactions as the active holds a different namespace (issue 11, rule f).
8. ``no_progress``: after every fault healed, no write was acknowledged within
   the bound derived from the configured timeouts (requirement 8).
9. ``controller_out``: at the end, a failover controller whose NameNode is
   healthy is not in the election (requirement 8; the stuck controller, which
   believed for ever that its NameNode did not answer: so "healthy" is the
   NameNode's real state, not the controller's view of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from qjournal.sim.history import (Accepted, ControllerState, Healed, History, NameNodeAck, NamespaceState,
                                  NsRead, OpAcked, OpCalled, OpFailed, Progress, Setup, Violation)
from qjournal.protocol.protocols import CLIENT

__all__ = ["cluster_violations", "CLUSTER_RULES"]

CLUSTER_RULES = ["op_lost", "op_invented", "not_once", "ack_not_durable", "read_lost", "read_stale",
                 "standby_diverged", "no_progress", "controller_out"]

#: the errors a second application of an operation gives, by method (rule 3)
_SECOND_APPLICATION = {
    CLIENT.create: ("FileAlreadyExistsError",),
    CLIENT.delete: ("FileNotFoundError_",),
    CLIENT.rename: ("FileNotFoundError_", "FileAlreadyExistsError"),
}


@dataclass
class _Op:
    call: OpCalled
    status: str = "pending"          # acked | failed | pending
    end_seq: int = 1 << 62           # seq of the ack or failure (when the client learned)
    result: object = None
    error_type: str = ""

    def effects(self) -> list[tuple[str, bool]]:
        """``(path, exists afterwards)`` for each path the operation changes."""
        c = self.call
        if c.method in (CLIENT.mkdirs, CLIENT.create):
            return [(c.path, True)]
        if c.method == CLIENT.delete:
            return [(c.path, False)]
        if c.method == CLIENT.rename:
            return [(c.path, False), (c.dst, True)]
        return []


@dataclass
class _PathLife:
    """The operations that changed one path, in call order."""

    ops: list[tuple[_Op, bool]] = field(default_factory=list)   # (operation, exists afterwards)

    def possible_after(self, upto_seq: int) -> set[bool]:
        """States the path may be in, given the operations that *ended* before ``upto_seq``
        (and any still pending or failed before it may have happened)."""
        states = {False}
        for op, after in self.ops:
            if op.call.seq > upto_seq:
                break
            if op.status == "acked" and op.end_seq < upto_seq:
                states = {after}
            else:
                states = states | {after}
        return states

    def possible_at_read(self, read: NsRead) -> set[bool]:
        """States ``read`` may show (rule 6): the operations that bind it (:func:`_binds`) show;
        every other operation called before its answer may or may not."""
        states = {False}
        for op, after in self.ops:
            if op.call.seq > read.seq:
                break
            states = {after} if _binds(op, read) else states | {after}
        return states


def _binds(op: _Op, read: NsRead) -> bool:
    """``read`` must reflect ``op`` (rule 6): acknowledged before the read began, and, for a
    session-only read, the reader's own."""
    began = read.call_seq if read.call_seq >= 0 else read.seq
    return (op.status == "acked" and op.end_seq < began
            and (not read.session_only or op.call.client == read.client))


def _ops(history: History) -> tuple[dict[tuple[str, int], _Op], dict[str, _PathLife]]:
    ops: dict[tuple[str, int], _Op] = {}
    for e in history:
        if isinstance(e, OpCalled):
            ops[(e.client, e.op_id)] = _Op(e)
        elif isinstance(e, OpAcked):
            op = ops[(e.client, e.op_id)]
            op.status, op.end_seq, op.result = "acked", e.seq, e.result
        elif isinstance(e, OpFailed):
            op = ops[(e.client, e.op_id)]
            op.status, op.end_seq, op.error_type = "failed", e.seq, e.error_type
    lives: dict[str, _PathLife] = {}
    for key in sorted(ops, key=lambda k: ops[k].call.seq):
        op = ops[key]
        for path, after in op.effects():
            lives.setdefault(path, _PathLife()).ops.append((op, after))
    return ops, lives


def cluster_violations(history: History) -> Iterator[Violation]:
    """Every violation of the rules of the module docstring, rule by rule (unlimited, unsorted).

    ``NamespaceState`` of the final active is needed for rules 1, 2 and 5; ``Setup`` and the
    JournalNodes' ``Accepted`` for rule 4; a history without client operations finds nothing.
    """
    ops, lives = _ops(history)
    for rule_fn in (_check_final, _check_not_once, _check_fenced_acks, _check_reads, _check_standby,
                    _check_liveness):
        yield from rule_fn(history, ops, lives)


def _final_active(history: History) -> NamespaceState | None:
    finals = [e for e in history.of(NamespaceState) if e.role == "active"]
    return finals[-1] if finals else None


# -- rules 1 and 2 ------------------------------------------------------------------

def _check_final(history, ops, lives):
    final = _final_active(history)
    if final is None:
        return
    present = set(final.paths)
    end = final.seq
    for path in sorted(lives):
        life = lives[path]
        states = life.possible_after(end)
        exists = path in present
        if exists not in states:
            op = life.ops[-1][0]
            what = "missing" if not exists else "still there"
            yield Violation("op_lost", f"{path} is {what} on the final active {final.nn}, but "
                            f"{op.call.client}'s acknowledged {op.call.method} (op {op.call.op_id}) "
                            f"says otherwise", (op.call.seq, op.end_seq, final.seq))
    # the clients' own directories: the top-level directories their operations work in
    dirs = {"/" + c.call.path.split("/")[1] for c in ops.values() if c.call.path.count("/") >= 1}
    for path in sorted(present):
        parent = path.rsplit("/", 1)[0]
        if parent in dirs and path not in lives:
            yield Violation("op_invented", f"{path} is on the final active {final.nn} but no client "
                            f"operation created it", (final.seq,))


# -- rule 3 -------------------------------------------------------------------------

def _check_not_once(history, ops, lives):
    for op in sorted(ops.values(), key=lambda o: o.call.seq):
        c = op.call
        if op.status == "failed" and op.error_type in _SECOND_APPLICATION.get(c.method, ()):
            yield Violation("not_once", f"{c.client}'s {c.method} {c.path} (op {c.op_id}) failed with "
                            f"{op.error_type}: a retry saw its own first application",
                            (c.seq, op.end_seq))
        elif op.status == "acked" and c.method == CLIENT.delete and op.result is False:
            yield Violation("not_once", f"{c.client}'s delete {c.path} (op {c.op_id}) answered False "
                            f"for a path whose creation was acknowledged", (c.seq, op.end_seq))


# -- rule 4 -------------------------------------------------------------------------

def _check_fenced_acks(history, ops, lives):
    setups = history.of(Setup)
    if not setups:
        return
    majority = len(setups[0].nodes) // 2 + 1
    # per (node, epoch): the highest txid accepted so far (a node accepts a segment's txids in order)
    accepted: dict[tuple[str, int], int] = {}
    for e in history:
        if isinstance(e, Accepted):
            key = (e.node, e.epoch)
            accepted[key] = max(accepted.get(key, 0), e.last_txid)
        elif isinstance(e, NameNodeAck):
            holders = sum(1 for (node, epoch), top in accepted.items() if epoch == e.epoch and top >= e.synced_txid)
            if holders < majority:
                yield Violation("ack_not_durable", f"{e.nn} (epoch {e.epoch}) answered {e.client}'s op {e.op_id} "
                                f"with txid {e.synced_txid} synced, but only {holders} JournalNode(s) had accepted it "
                                f"at epoch {e.epoch}", (e.seq,))


# -- rules 5 and 6 ------------------------------------------------------------------

def _check_reads(history, ops, lives):
    final = _final_active(history)
    present = set(final.paths) if final is not None else None
    seen_exist: dict[tuple[str, str], NsRead] = {}   # (client, path) -> last read that saw it exist
    for e in history.of(NsRead):
        life = lives.get(e.path, _PathLife())
        states = life.possible_at_read(e)
        if e.exists not in states:
            kind = "session-only read" if e.session_only else "read"
            yield Violation("read_stale", f"{e.client}'s {kind} of {e.path} from {e.nn} saw it "
                            f"{'present' if e.exists else 'absent'}, but the operations acknowledged before "
                            f"the read began say otherwise", (e.seq,))
            continue
        key = (e.client, e.path)
        if e.exists:
            seen_exist[key] = e
            # it must stay, unless an operation that removes it may have been applied after the read:
            # any removal that did not bind the read (a failed one may apply at any time; another
            # client's may be applied after the state a session-only read saw)
            removed_later = any(not after and not _binds(op, e) for op, after in life.ops)
            if present is not None and e.path not in present and not removed_later:
                yield Violation("read_lost", f"{e.client} read {e.path} as present from {e.nn}; it is "
                                f"missing from the final active {final.nn}", (e.seq, final.seq))
        elif key in seen_exist:
            prev = seen_exist.pop(key)
            removed_between = any(not after and op.call.seq < e.seq and not _binds(op, prev)
                                  for op, after in life.ops)
            if not removed_between:
                yield Violation("read_stale", f"{e.client} read {e.path} as absent from {e.nn} after it had "
                                f"read it present from {prev.nn}", (prev.seq, e.seq))


# -- rule 7 -------------------------------------------------------------------------

def _check_standby(history, ops, lives):
    final = _final_active(history)
    if final is None:
        return
    for e in history.of(NamespaceState):
        if e.role != "active" and e.last_txid == final.last_txid and e.paths != final.paths:
            diff = sorted(set(e.paths) ^ set(final.paths))[:5]
            yield Violation("standby_diverged", f"{e.role} {e.nn} at txid {e.last_txid} differs from the "
                            f"active {final.nn} at the same txid: {diff}", (e.seq, final.seq))


# -- rules 8 and 9 ------------------------------------------------------------------

def _check_liveness(history, ops, lives):
    healed = history.of(Healed)
    if healed:
        h = healed[-1]
        done = [p for p in history.of(Progress) if p.seq > h.seq]
        if not done:
            yield Violation("no_progress", f"no write was acknowledged after the faults healed "
                            f"(bound {h.bound_s:.1f}s)", (h.seq,))
        elif done[0].time - h.time > h.bound_s:
            yield Violation("no_progress", f"the first write after the faults healed took "
                            f"{done[0].time - h.time:.1f}s, more than the bound {h.bound_s:.1f}s",
                            (h.seq, done[0].seq))
    for e in history.of(ControllerState):
        if e.nn_healthy and e.elector not in ("ACTIVE", "STANDBY"):
            yield Violation("controller_out", f"the NameNode {e.nn} is healthy but its controller is {e.elector} "
                            f"in the election (it sees {e.health})", (e.seq,))

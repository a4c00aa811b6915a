"""Linearizability of a history of namespace operations: a search for a linearization, beside the rules.

Why: the rules (:mod:`qjournal.sim.cluster_rules`) list anomalies somebody thought of
(``op_lost``, ``read_stale``, ...); a kind nobody wrote a rule for passes them. This module asks
the general question instead (PRODUCT.md requirement 10): is there a total order of the clients'
operations, consistent with real time, in which each answer is the one a single namespace would
give? It is pure (no I/O, no asyncio; the clock of an optional wall-time budget is passed in)
and takes only the observed history (:mod:`qjournal.sim.history`), so the simulator, the chaos
harness and the hosts runs are judged by the same code.

Theory of operation
-------------------

*Operations.* Each client call is an operation with an interval ``[call, ret]`` in history
positions (``seq``): a write from its ``OpCalled`` to its ``OpAcked``/``OpFailed``, a read
(``NsRead``) from ``call_seq`` to its own ``seq``, and the final active's ``NamespaceState`` a
``list`` of every path at its instant. What the client learnt is the operation's *output*:

* an acknowledgement, or a namespace error (:data:`ANSWER_ERRORS`: ``FileAlreadyExistsError``,
  ``FileNotFoundError_``, ...): a definite answer the model must reproduce (a delete answering
  ``False`` is the HDFS spelling of "not found");
* an error the NameNode gives before touching anything, identically on every attempt
  (:data:`REFUSED_ERRORS`: a bad path, a permission refused): the operation did not happen
  (it is dropped from the search);
* anything else (``RpcTimeoutError``, ``TransportError``, ``StandbyError`` after the retries, a
  fatal journal error, no answer at all before the run ended): the outcome is unknown. The
  operation may take effect at any point after its call, or never, so its ``ret`` is infinite and
  any output is accepted (a write "never" applied is one linearized after everything else).

*The model* (:func:`apply`) is the NameNode's namespace as ``namenode/namespace.py`` implements
it, for what the workloads issue: ``mkdirs`` (parents too; a file in the way is
``FileAlreadyExistsError``), ``create`` without overwrite (the path existing is
``FileAlreadyExistsError``, a missing parent ``FileNotFoundError_``), ``delete`` recursive (a
missing path is ``FileNotFoundError_``), ``rename`` without overwrite (into an existing
directory under its own name; a missing source ``FileNotFoundError_``, an existing destination
``FileAlreadyExistsError``), ``read`` (does the path exist) and ``list`` (the set of paths). The
history records no flags; the workloads (``sim/ha_workload.NamespaceClient``) call delete with
``recursive=True`` and the others without ``overwrite``.

*Partition* (Herlihy and Wing's locality: a history is linearizable iff the sub-history of each
object is). The objects here are sets of paths that no operation spans. Each operation has a
*footprint*: its paths, every path of the history inside a subtree it removes or moves, and each
ancestor of those that is in the history and not *stable* at its call. An ancestor is stable for
an operation when a definite success made it exist as a directory (``mkdirs`` of it) before the
operation was called and no operation of the history can remove it (a delete or rename of it or
of one of its ancestors): from then on it exists whatever the order, so the operation's outcome
does not depend on the operations that touch it. Footprints that share a path are joined
(union-find); each part is searched alone, and an ancestor outside a part's paths is an existing
directory in its model. The workload keeps parts small: a path's life (create, then a rename or
a delete) and the reads of it form one part; a client's directory is created, acknowledged,
before anything inside it and is never removed, so it is stable and does not join them. A path
of the final namespace under a path of the history that no operation created joins its parent's
part (its model starts without it: an invented path is not linearizable).

*Observer reads* (HDFS-12943; cluster_rules rule 6). A read an observer answered after an
``msync`` for it is linearizable like the active's. A *session-only* read (no ``msync`` for it)
returns the state of some prefix of the log not older than the client's own state id: that of
its own earlier definite answers (writes acknowledged or refused by the namespace, and reads).
So within its part it may be placed anywhere after the client's latest earlier definite
operation of that part and before its own answer: its call becomes that operation's call, and it
may only be linearized once that operation is. (Per part this is weaker than one prefix for
every part, never stronger: no false alarm.)

*Search* (Wing and Gong, with the memoization of Lowe, Porcupine and Knossos). Calls and returns
in time order form a linked list; the search repeatedly takes the first entry: a call whose
operation the model accepts from the current state is linearized (both its entries lifted from
the list) unless the pair (set of linearized operations, model state) was already explored; a
return whose operation is not linearized yet means the last choice was wrong, so it is undone
(backtracking). All operations linearized: a linearization exists. Nothing left to undo: none
does. Each explored pair is remembered, so no configuration is searched twice.

*Budget.* A search takes at most ``max_steps`` steps per history (and, when a clock is given, at
most ``budget_s`` of it). A part it could not finish is reported as undecided, never as passing.

Invariants:

1. A history is reported linearizable only when every part was searched to a linearization.
2. An operation with an unknown outcome is never required to have taken effect, nor forbidden to.
3. Parts are searched in a fixed order (by their first operation), so the verdict and the steps
   taken are the same for the same history.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from qjournal.protocol.protocols import CLIENT
from qjournal.sim.history import History, NamespaceState, NsRead, OpAcked, OpCalled, OpFailed, Violation

__all__ = ["Operation", "LinearizabilityResult", "PartResult", "operations_of", "partition", "apply",
           "violations_of", "search", "check_linearizable", "linearizability_violations", "LIN_RULES", "ANSWER_ERRORS",
           "REFUSED_ERRORS", "UNKNOWN", "DEFAULT_MAX_STEPS"]

#: the rules this checker reports (beside cluster_rules')
LIN_RULES = ["not_linearizable", "linearizability_undecided"]

#: errors that are the namespace's answer: the operation read the state and changed nothing
ANSWER_ERRORS = frozenset({"FileAlreadyExistsError", "FileNotFoundError_", "NotADirectoryError_",
                           "DirectoryNotEmptyError"})
#: errors given before anything changes, by every attempt alike: the operation did not happen
REFUSED_ERRORS = frozenset({"InvalidRequestError", "PermissionDeniedError", "AuthorizationError",
                            "AuthenticationError"})

#: the output of an operation whose outcome is unknown: any model output is accepted
UNKNOWN = "?"
#: search steps per history before the verdict is "undecided"
DEFAULT_MAX_STEPS = 2_000_000
_INF = float("inf")
_OK = "ok"


@dataclass(frozen=True)
class Operation:
    """One client operation as the search sees it.

    Attributes:
        client: who called it.
        kind: ``mkdirs``, ``create``, ``delete``, ``rename``, ``read`` or ``list``.
        path: its path (the source of a rename).
        dst: a rename's destination.
        call: history position of its call (a session-only read: see the module docstring).
        ret: history position of its answer; infinite when the outcome is unknown.
        output: ``ok``, an error name, a bool (read), a frozenset (list) or :data:`UNKNOWN`.
        seqs: the history events that show it (for reports).
        after: index (in :func:`operations_of`'s list) of an operation it must follow, or -1.
        session_only: a session-only observer read.
    """

    client: str
    kind: str
    path: str
    dst: str
    call: float
    ret: float
    output: Any
    seqs: tuple[int, ...]
    after: int = -1
    session_only: bool = False

    def describe(self) -> str:
        what = f"{self.kind} {self.path}" + (f" -> {self.dst}" if self.dst else "")
        out = self.output
        if isinstance(out, frozenset):
            out = "{" + ", ".join(sorted(out)) + "}"
        ret = "…" if self.ret == _INF else f"{self.ret:g}"
        sess = " (session-only)" if self.session_only else ""
        return f"{self.client}: {what} = {out}{sess} [{self.call:g}, {ret}]"


# -- the model ------------------------------------------------------------------------------------

def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _ancestors(path: str) -> list[str]:
    """Proper ancestors, nearest first, without the root."""
    out = []
    p = _parent(path)
    while p != "/":
        out.append(p)
        p = _parent(p)
    return out


def _under(path: str, top: str) -> bool:
    return path.startswith(top + "/")


def _kind(state: frozenset, scope: frozenset, path: str) -> str | None:
    """``d``, ``f`` or None (absent); a path outside the part is an existing directory (stable)."""
    if path == "/" or path not in scope:
        return "d"
    if (path, "d") in state:
        return "d"
    if (path, "f") in state:
        return "f"
    return None


def apply(state: frozenset, scope: frozenset, op: Operation) -> tuple[Any, frozenset]:
    """The namespace's answer to ``op`` in ``state`` and the state after it.

    Args:
        state: the present paths of the part, as ``(path, "d"|"f")`` pairs.
        scope: the paths of the part (any other path is an existing directory).
        op: the operation.

    Returns:
        ``(output, new state)``; output ``ok``, an error name, a bool (read) or a frozenset (list).
    """
    k = op.kind
    if k == "read":
        return _kind(state, scope, op.path) is not None, state
    if k == "list":
        return frozenset(p for p, _ in state), state
    if k == "mkdirs":
        cur = _kind(state, scope, op.path)
        if cur == "d":
            return _OK, state
        if cur == "f":
            return "FileAlreadyExistsError", state
        chain = [op.path] + _ancestors(op.path)
        new = set(state)
        for p in chain:
            pk = _kind(state, scope, p)
            if pk == "f":
                return "NotADirectoryError_", state
            if pk == "d":
                break
            new.add((p, "d"))
        return _OK, frozenset(new)
    if k == "create":
        if _kind(state, scope, op.path) is not None:
            return "FileAlreadyExistsError", state
        pk = _kind(state, scope, _parent(op.path))
        if pk is None:
            return "FileNotFoundError_", state
        if pk == "f":
            return "NotADirectoryError_", state
        return _OK, state | {(op.path, "f")}
    if k == "delete":
        if _kind(state, scope, op.path) is None:
            return "FileNotFoundError_", state
        return _OK, frozenset(x for x in state if x[0] != op.path and not _under(x[0], op.path))
    if k == "rename":
        src, dst = op.path, op.dst
        sk = _kind(state, scope, src)
        if sk is None:
            return "FileNotFoundError_", state
        dk = _kind(state, scope, dst)
        if dk == "d" and dst != src:
            dst = dst.rstrip("/") + "/" + src.rsplit("/", 1)[1]     # into the directory
            dk = _kind(state, scope, dst)
        if dst == src:
            return _OK, state
        if _under(dst, src):
            return "InvalidRequestError", state
        if dk is not None:
            return "FileAlreadyExistsError", state
        pk = _kind(state, scope, _parent(dst))
        if pk is None:
            return "FileNotFoundError_", state
        if pk == "f":
            return "NotADirectoryError_", state
        moved = set()
        for p, t in state:
            if p == src:
                moved.add((dst, t))
            elif _under(p, src):
                moved.add((dst + p[len(src):], t))
            else:
                moved.add((p, t))
        return _OK, frozenset(moved)
    raise ValueError(f"linearizability model: unknown operation {k!r}")


def _accepts(model_out: Any, op: Operation) -> bool:
    return op.output == UNKNOWN or model_out == op.output


# -- from a history to operations -------------------------------------------------------------------

def operations_of(history: History) -> list[Operation]:
    """The operations of ``history`` (module docstring), in call order; refused ones dropped.

    The final active's ``NamespaceState`` becomes one ``list`` operation.
    """
    calls: dict[tuple[str, int], OpCalled] = {}
    ends: dict[tuple[str, int], Any] = {}
    raw: list[tuple[float, Operation]] = []
    for e in history:
        if isinstance(e, OpCalled):
            calls[(e.client, e.op_id)] = e
        elif isinstance(e, (OpAcked, OpFailed)):
            ends[(e.client, e.op_id)] = e
    for key, c in calls.items():
        end = ends.get(key)
        output: Any = UNKNOWN
        ret = _INF
        seqs: tuple[int, ...] = (c.seq,)
        if isinstance(end, OpAcked):
            output, ret, seqs = _OK, end.seq, (c.seq, end.seq)
            if c.method == CLIENT.delete and end.result is False:
                output = "FileNotFoundError_"     # HDFS's delete answering false: nothing to delete
        elif isinstance(end, OpFailed):
            if end.error_type in REFUSED_ERRORS:
                continue
            seqs = (c.seq, end.seq)
            if end.error_type in ANSWER_ERRORS:
                output, ret = end.error_type, end.seq
        raw.append((c.seq, Operation(c.client, c.method, c.path, c.dst, c.seq, ret, output, seqs)))
    for e in history.of(NsRead):
        call = e.call_seq if e.call_seq >= 0 else e.seq
        raw.append((call, Operation(e.client, "read", e.path, "", call, e.seq, bool(e.exists), (e.seq,),
                                    session_only=e.session_only)))
    finals = [e for e in history.of(NamespaceState) if e.role == "active"]
    if finals:
        f = finals[-1]
        raw.append((f.seq, Operation(f"final:{f.nn}", "list", "/", "", f.seq, f.seq, frozenset(f.paths),
                                     (f.seq,))))
    raw.sort(key=lambda t: (t[0], t[1].seqs))
    return [op for _, op in raw]


# -- the partition ----------------------------------------------------------------------------------

class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class _Part:
    scope: frozenset
    ops: list[Operation] = field(default_factory=list)


def partition(ops: list[Operation]) -> list[tuple[frozenset, list[Operation]]]:
    """Split ``ops`` into independent parts (module docstring, *Partition*).

    Returns:
        ``(paths of the part, its operations)`` in the order of each part's first operation; the
        final ``list`` is split into one per part (its output restricted to the part's paths),
        and every path it names that no operation touched joins its parent's part.
    """
    writes = [op for op in ops if op.kind not in ("read", "list")]
    final = next((op for op in ops if op.kind == "list"), None)
    history_paths: set[str] = set()
    for op in ops:
        if op.kind != "list":
            history_paths.add(op.path)
            if op.dst:
                history_paths.add(op.dst)
    written = {p for op in writes for p in (op.path, op.dst) if p}
    # removable: a path some operation may delete or move away (it, or an ancestor of it)
    removers = {op.path for op in writes if op.kind in (CLIENT.delete, CLIENT.rename)}

    def removable(p: str) -> bool:
        return p in removers or any(a in removers for a in _ancestors(p))

    made_dir: dict[str, float] = {}      # path -> earliest definite mkdirs answer
    for op in writes:
        if op.kind == "mkdirs" and op.output == _OK:
            for p in [op.path] + _ancestors(op.path):
                made_dir[p] = min(made_dir.get(p, _INF), op.ret)

    def stable(p: str, at: float) -> bool:
        return p not in written or (made_dir.get(p, _INF) < at and not removable(p))

    sorted_paths = sorted(history_paths)

    def inside(top: str) -> list[str]:
        # every path under top sorts between top + "/" and top + "0" ("0" follows "/")
        return sorted_paths[bisect.bisect_left(sorted_paths, top + "/"):bisect.bisect_left(sorted_paths, top + "0")]

    uf = _UnionFind()
    footprints: list[list[str]] = []
    for op in ops:
        if op.kind == "list":
            footprints.append([])
            continue
        fp = [op.path] + ([op.dst] if op.dst else [])
        if op.kind == "rename":
            fp.append(op.dst.rstrip("/") + "/" + op.path.rsplit("/", 1)[1])
        if op.kind in (CLIENT.delete, CLIENT.rename):
            for top in list(fp):
                fp += inside(top)
        for p in list(fp):
            fp += [a for a in _ancestors(p) if not stable(a, op.call)]
        footprints.append(fp)
        for p in fp[1:]:
            uf.union(fp[0], p)
        uf.find(fp[0])
    extra: list[str] = []
    if final is not None:
        for p in sorted(final.output):
            if p in history_paths:
                continue
            # a path no operation named: judged when it lies under a path the history names (an
            # invented path); another run's paths or a probe's are not this history's
            owner = next((a for a in _ancestors(p) if a in history_paths), None)
            if owner is not None:
                uf.union(p, owner)
                extra.append(p)
    parts: dict[str, _Part] = {}
    order: list[str] = []
    members: dict[str, set[str]] = {}
    for x in list(uf.parent):
        members.setdefault(uf.find(x), set()).add(x)
    for op, fp in zip(ops, footprints):
        if op.kind == "list":
            continue
        root = uf.find(fp[0])
        if root not in parts:
            parts[root] = _Part(frozenset(members[root]))
            order.append(root)
        parts[root].ops.append(op)
    for p in extra:
        root = uf.find(p)
        if root not in parts:
            parts[root] = _Part(frozenset(members[root]))
            order.append(root)
    out = []
    for root in order:
        part = parts[root]
        part_ops = list(part.ops)
        if final is not None:
            part_ops.append(dataclasses.replace(final, output=frozenset(p for p in final.output
                                                                        if p in part.scope)))
        out.append((part.scope, _session_bounds(part_ops)))
    return out


def _session_bounds(ops: list[Operation]) -> list[Operation]:
    """Give each session-only read its earliest place: the call of the client's latest earlier
    definite operation of the part, which it must follow (``after``). Indices are into the list."""
    out: list[Operation] = []
    last_definite: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op.kind == "read" and op.session_only:
            j = last_definite.get(op.client, -1)
            call = out[j].call if j >= 0 else -1.0
            op = dataclasses.replace(op, call=call, after=j)
        out.append(op)
        if op.output != UNKNOWN:
            last_definite[op.client] = i
    return out


# -- the search -------------------------------------------------------------------------------------

@dataclass
class PartResult:
    """The verdict on one part.

    Attributes:
        verdict: ``linearizable``, ``not_linearizable`` or ``undecided``.
        ops: the part's operations.
        steps: search steps taken.
        best: the longest partial linearization found (indices into ``ops``), for reports.
        stuck: the operation whose answer came before any order could place it (not linearizable).
    """

    verdict: str
    ops: list[Operation]
    scope: frozenset
    steps: int
    best: list[int] = field(default_factory=list)
    stuck: int = -1

    def explain(self, limit: int = 30) -> str:
        lines = [f"{self.verdict}: {len(self.ops)} operations on {', '.join(sorted(self.scope)[:6])}"
                 f"{' …' if len(self.scope) > 6 else ''} ({self.steps} search steps)"]
        if self.best:
            lines.append("  the longest order found:")
            lines += [f"    {k + 1}. {self.ops[i].describe()}" for k, i in enumerate(self.best[:limit])]
        if self.stuck >= 0:
            lines.append(f"  cannot be placed: {self.ops[self.stuck].describe()}")
        rest = [i for i in range(len(self.ops)) if i not in set(self.best) and i != self.stuck]
        if rest:
            lines.append("  not placed:")
            lines += [f"    {self.ops[i].describe()}" for i in rest[:limit]]
        return "\n".join(lines)


def search(ops: list[Operation], scope: frozenset, *, max_steps: int = DEFAULT_MAX_STEPS,
           deadline: Callable[[], bool] | None = None) -> PartResult:
    """Wing and Gong's search with memoization over one part (module docstring).

    Args:
        ops: the part's operations (``after`` indexes this list).
        scope: the part's paths.
        max_steps: the step budget.
        deadline: called every 1024 steps; True stops the search (undecided).

    Returns:
        The part's verdict.
    """
    n = len(ops)
    # entries: (time, 0 for a call / 1 for a return, op index); a tie puts calls first (concurrent)
    entries = sorted([(op.call, 0, i) for i, op in enumerate(ops)] + [(op.ret, 1, i) for i, op in enumerate(ops)],
                     key=lambda t: (t[0], t[1], t[2]))
    m = len(entries)
    nxt = list(range(1, m + 2))          # index m is the end; -1 the head
    prv = list(range(-1, m))
    head_next = 0
    call_pos = [0] * n
    ret_pos = [0] * n
    for pos, (_, is_ret, i) in enumerate(entries):
        (ret_pos if is_ret else call_pos)[i] = pos

    def unlink(pos: int) -> None:
        nonlocal head_next
        p, q = prv[pos], nxt[pos]
        if p == -1:
            head_next = q
        else:
            nxt[p] = q
        if q < m:
            prv[q] = p

    def relink(pos: int) -> None:
        nonlocal head_next
        p, q = prv[pos], nxt[pos]
        if p == -1:
            head_next = pos
        else:
            nxt[p] = pos
        if q < m:
            prv[q] = pos

    state: frozenset = frozenset()
    linearized = 0
    seen: set[tuple[int, frozenset]] = set()
    stack: list[tuple[int, frozenset]] = []      # (op index, state before it)
    best: list[int] = []
    steps = 0
    pos = head_next
    stuck = -1
    while head_next < m:
        steps += 1
        if steps > max_steps or (deadline is not None and steps % 1024 == 0 and deadline()):
            return PartResult("undecided", ops, scope, steps, best)
        _, is_ret, i = entries[pos]
        if not is_ret:
            op = ops[i]
            if op.after < 0 or linearized >> op.after & 1:
                out, new_state = apply(state, scope, op)
                if _accepts(out, op):
                    key = (linearized | 1 << i, new_state)
                    if key not in seen:
                        seen.add(key)
                        stack.append((i, state))
                        state, linearized = new_state, linearized | 1 << i
                        unlink(ret_pos[i])
                        unlink(call_pos[i])
                        if len(stack) > len(best):
                            best = [j for j, _ in stack]
                        pos = head_next
                        continue
            pos = nxt[pos]
        else:
            if not stack:
                return PartResult("not_linearizable", ops, scope, steps, best, stuck if stuck >= 0 else i)
            if stuck < 0 or len(stack) >= len(best):
                stuck = i
            j, state = stack.pop()
            linearized &= ~(1 << j)
            relink(call_pos[j])
            relink(ret_pos[j])
            pos = nxt[call_pos[j]]
    return PartResult("linearizable", ops, scope, steps, [j for j, _ in stack])


@dataclass
class LinearizabilityResult:
    """The verdict on a history: ``linearizable`` only when every part is (invariant 1)."""

    verdict: str
    parts: int
    operations: int
    steps: int
    failed: list[PartResult] = field(default_factory=list)
    undecided: list[PartResult] = field(default_factory=list)
    largest_part: int = 0


def check_linearizable(history: History, *, max_steps: int = DEFAULT_MAX_STEPS,
                       clock: Callable[[], float] | None = None, budget_s: float | None = None,
                       max_reports: int = 3) -> LinearizabilityResult:
    """Search every part of ``history`` for a linearization.

    Args:
        history: the observed events (client operations, reads, the final active's namespace).
        max_steps: search steps for the whole history; past them the parts left are undecided.
        clock: a monotonic clock for ``budget_s`` (the caller's; none: steps alone bound it).
        budget_s: wall time for the whole history.
        max_reports: keep at most this many failed (and undecided) parts.

    Returns:
        The verdict with the parts that failed or could not be decided.
    """
    ops = operations_of(history)
    parts = partition(ops)
    deadline = None
    if clock is not None and budget_s is not None:
        end = clock() + budget_s
        deadline = lambda: clock() > end   # noqa: E731
    total = 0
    failed: list[PartResult] = []
    undecided: list[PartResult] = []
    largest = max((len(o) for _, o in parts), default=0)
    for k, (scope, part_ops) in enumerate(parts):
        if total >= max_steps or (deadline is not None and deadline()):
            # the budget is spent: the parts left were not searched; say so, never pass them
            undecided += [PartResult("undecided", o, s, 0) for s, o in parts[k:k + max_reports]]
            break
        r = search(part_ops, scope, max_steps=max_steps - total, deadline=deadline)
        total += r.steps
        if r.verdict == "not_linearizable" and len(failed) < max_reports:
            failed.append(r)
        elif r.verdict == "undecided" and len(undecided) < max_reports:
            undecided.append(r)
    verdict = "not_linearizable" if failed else "undecided" if undecided else "linearizable"
    return LinearizabilityResult(verdict, len(parts), len(ops), total, failed, undecided, largest)


def linearizability_violations(history: History, **kwargs: Any) -> list[Violation]:
    """:func:`check_linearizable` as the checkers' violations (rules :data:`LIN_RULES`)."""
    return violations_of(check_linearizable(history, **kwargs))


def violations_of(r: LinearizabilityResult) -> list[Violation]:
    """A search's result as the checkers' violations: for a caller that also reports the result itself
    (its verdict and counts) and so must not search twice."""
    out = []
    for p in r.failed:
        seqs = tuple(sorted({s for op in p.ops for s in op.seqs}))
        out.append(Violation("not_linearizable", "no linearization of the operations on "
                             f"{', '.join(sorted(p.scope)[:4])}:\n{p.explain()}", seqs[:40]))
    for p in r.undecided:
        out.append(Violation("linearizability_undecided", f"the search could not decide within its budget "
                             f"({r.steps} steps for the history):\n{p.explain(limit=10)}",
                             tuple(sorted({s for op in p.ops for s in op.seqs}))[:40]))
    return out

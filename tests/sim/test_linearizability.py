"""The linearizability checker on hand-written histories: what is and what is not linearizable.

Each history is a list of events (a float moves the clock); the checker sees only them.
"""

from __future__ import annotations

import pytest

from qjournal.sim.history import History, NamespaceState, NsRead, OpAcked, OpCalled, OpFailed
from qjournal.sim.linearizability import (Operation, apply, check_linearizable, linearizability_violations,
                                          operations_of, partition, search)


def hist(*events):
    h = History()
    for e in events:
        h.add(e)
    return h


def verdict(*events, **kw):
    return check_linearizable(hist(*events), **kw).verdict


def final(*paths, nn="nn1", role="active"):
    return NamespaceState(nn, role, 10, tuple(sorted(paths)))


def call(client, op_id, method, path, dst=""):
    return OpCalled(client, op_id, method, path, dst)


def ack(client, op_id, result=None):
    return OpAcked(client, op_id, "nn1", result)


def fail(client, op_id, error):
    return OpFailed(client, op_id, error)


def read(client, path, exists, call_seq, session_only=False):
    return NsRead(client, "nn1", path, exists, call_seq=call_seq, session_only=session_only)


# -- linearizable ---------------------------------------------------------------------------------

def test_a_sequential_life_is_linearizable():
    assert verdict(call("c1", 0, "mkdirs", "/c1"), ack("c1", 0),
                   call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                   read("c2", "/c1/a", True, 4),
                   call("c1", 2, "rename", "/c1/a", "/c1/b"), ack("c1", 2),
                   read("c2", "/c1/b", True, 7),
                   call("c1", 3, "delete", "/c1/b"), ack("c1", 3),
                   final("/c1")) == "linearizable"


def test_a_read_concurrent_with_a_create_may_see_either():
    for seen in (True, False):
        assert verdict(call("c1", 1, "create", "/c1/a"), read("c2", "/c1/a", seen, 0),
                       ack("c1", 1), final("/c1/a")) == "linearizable"


def test_a_write_with_an_unknown_outcome_may_or_may_not_have_happened():
    for present in ((), ("/c1/a",)):
        assert verdict(call("c1", 1, "create", "/c1/a"), fail("c1", 1, "RpcTimeoutError"),
                       final(*present)) == "linearizable"
    # ...even long after the client gave up (a late request applied by a NameNode)
    assert verdict(call("c1", 1, "create", "/c1/a"), fail("c1", 1, "TransportError"),
                   read("c2", "/c1/a", False, 2), read("c2", "/c1/a", True, 3),
                   final("/c1/a")) == "linearizable"


def test_a_pending_write_at_the_end_may_or_may_not_have_happened():
    for present in ((), ("/c1/a",)):
        assert verdict(call("c1", 1, "create", "/c1/a"), final(*present)) == "linearizable"


def test_reads_reorder_against_concurrent_writes_only():
    # two overlapping reads of a create in flight: one sees it, the other not, either order
    assert verdict(call("c1", 1, "create", "/c1/a"), read("c2", "/c1/a", True, 0), read("c3", "/c1/a", False, 0),
                   ack("c1", 1), final("/c1/a")) == "linearizable"


def test_a_session_only_read_may_be_behind_other_clients():
    # c2's observer read without msync lags c1's acknowledged create: allowed (HDFS-12943)
    assert verdict(call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                   read("c2", "/c1/a", False, 2, session_only=True), final("/c1/a")) == "linearizable"


# -- not linearizable -----------------------------------------------------------------------------

def test_a_stale_read_is_not_linearizable():
    r = check_linearizable(hist(call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                                read("c2", "/c1/a", False, 2), final("/c1/a")))
    assert r.verdict == "not_linearizable"
    assert "read /c1/a = False" in r.failed[0].explain()


def test_a_lost_update_is_not_linearizable():
    assert verdict(call("c1", 1, "create", "/c1/a"), ack("c1", 1), final()) == "not_linearizable"
    assert verdict(call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                   call("c1", 2, "delete", "/c1/a"), ack("c1", 2), final("/c1/a")) == "not_linearizable"


def test_a_read_of_an_aborted_write_is_not_linearizable():
    # the create failed with a namespace answer (so it did not happen), yet a reader saw its path
    assert verdict(call("c1", 1, "mkdirs", "/c1/a"), ack("c1", 1),
                   call("c1", 2, "create", "/c1/a/f"), fail("c1", 2, "FileNotFoundError_"),
                   read("c2", "/c1/a/f", True, 4), final("/c1/a")) == "not_linearizable"
    # a write refused before it ran (a bad path) never happens: a reader seeing it is an anomaly
    assert verdict(call("c1", 1, "create", "/c1/a"), fail("c1", 1, "InvalidRequestError"),
                   read("c2", "/c1/a", True, 2), final()) == "not_linearizable"


def test_a_read_that_sees_a_write_then_loses_it_is_not_linearizable():
    # the write's outcome is unknown, but two real-time ordered reads disagree about it
    assert verdict(call("c1", 1, "create", "/c1/a"), read("c2", "/c1/a", True, 0),
                   read("c3", "/c1/a", False, 2), fail("c1", 1, "RpcTimeoutError"),
                   final("/c1/a")) == "not_linearizable"


def test_a_write_applied_twice_is_not_linearizable():
    # a retried create that met its own first application
    assert verdict(call("c1", 1, "create", "/c1/a"), fail("c1", 1, "FileAlreadyExistsError"),
                   final("/c1/a")) == "not_linearizable"
    # a retried delete that found nothing left to delete
    assert verdict(call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                   call("c1", 2, "delete", "/c1/a"), ack("c1", 2, False), final()) == "not_linearizable"
    # a rename applied twice: the retry finds its source gone
    assert verdict(call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                   call("c1", 2, "rename", "/c1/a", "/c1/b"), fail("c1", 2, "FileNotFoundError_"),
                   final("/c1/b")) == "not_linearizable"


def test_an_invented_path_is_not_linearizable():
    assert verdict(call("c1", 0, "mkdirs", "/c1"), ack("c1", 0), final("/c1", "/c1/zzz")) == "not_linearizable"


def test_a_session_only_read_never_goes_behind_its_own_session():
    # its own acknowledged create (read-your-writes)
    assert verdict(call("c2", 1, "create", "/c1/a"), ack("c2", 1),
                   read("c2", "/c1/a", False, 2, session_only=True), final("/c1/a")) == "not_linearizable"
    # its own earlier read (monotonic reads)
    assert verdict(call("c1", 1, "create", "/c1/a"), ack("c1", 1),
                   read("c2", "/c1/a", True, 2), read("c2", "/c1/a", False, 3, session_only=True),
                   final("/c1/a")) == "not_linearizable"


def test_the_final_namespace_is_judged_only_for_the_history_paths():
    # another run's paths and the probe's are not this history's
    assert verdict(call("c1", 0, "mkdirs", "/c1"), ack("c1", 0),
                   final("/c1", "/probe", "/probe/p1", "/old", "/old/x")) == "linearizable"


# -- the model, the partition and the budget -------------------------------------------------------

def _op(kind, path, dst=""):
    return Operation("c", kind, path, dst, 0, 1, "?", ())


@pytest.mark.parametrize("state,op,out,after", [
    ({}, _op("mkdirs", "/a/b"), "ok", {("/a", "d"), ("/a/b", "d")}),
    ({("/a", "f")}, _op("mkdirs", "/a"), "FileAlreadyExistsError", {("/a", "f")}),
    ({("/a", "f")}, _op("mkdirs", "/a/b"), "NotADirectoryError_", {("/a", "f")}),
    ({}, _op("create", "/a/b"), "FileNotFoundError_", set()),
    ({("/a", "d")}, _op("create", "/a/b"), "ok", {("/a", "d"), ("/a/b", "f")}),
    ({("/a", "d")}, _op("create", "/a"), "FileAlreadyExistsError", {("/a", "d")}),
    ({("/a", "d"), ("/a/b", "f")}, _op("delete", "/a"), "ok", set()),
    ({}, _op("delete", "/a"), "FileNotFoundError_", set()),
    ({("/a", "d"), ("/a/b", "f")}, _op("rename", "/a", "/c"), "ok", {("/c", "d"), ("/c/b", "f")}),
    ({("/a", "f"), ("/c", "d")}, _op("rename", "/a", "/c"), "ok", {("/c", "d"), ("/c/a", "f")}),
    ({("/a", "f"), ("/c", "f")}, _op("rename", "/a", "/c"), "FileAlreadyExistsError", {("/a", "f"), ("/c", "f")}),
    ({}, _op("rename", "/a", "/c"), "FileNotFoundError_", set()),
    ({("/a", "d")}, _op("rename", "/a", "/a/x"), "InvalidRequestError", {("/a", "d")}),
    ({("/a", "d")}, _op("read", "/a"), True, {("/a", "d")}),
])
def test_the_model_answers_as_the_namespace_does(state, op, out, after):
    scope = frozenset({"/a", "/a/b", "/c", "/c/a", "/c/b", "/a/x"})
    got, new = apply(frozenset(state), scope, op)
    assert (got, set(new)) == (out, after)


def test_paths_that_no_operation_spans_are_searched_apart():
    h = hist(call("c1", 0, "mkdirs", "/c1"), ack("c1", 0),
             call("c1", 1, "create", "/c1/a"), ack("c1", 1),
             call("c1", 2, "create", "/c1/b"), ack("c1", 2),
             call("c1", 3, "rename", "/c1/b", "/c1/c"), ack("c1", 3),
             read("c2", "/c1/c", True, 8), final("/c1", "/c1/a", "/c1/c"))
    scopes = sorted(sorted(s) for s, _ in partition(operations_of(h)))
    assert scopes == [["/c1"], ["/c1/a"], ["/c1/b", "/c1/c", "/c1/c/b"]]


def test_a_directory_that_may_be_removed_joins_its_children():
    h = hist(call("c1", 0, "mkdirs", "/c1/d"), ack("c1", 0),
             call("c1", 1, "create", "/c1/d/a"), ack("c1", 1),
             call("c1", 2, "delete", "/c1/d"), ack("c1", 2), final())
    assert len(partition(operations_of(h))) == 1
    assert check_linearizable(h).verdict == "linearizable"
    h2 = hist(call("c1", 0, "mkdirs", "/c1/d"), ack("c1", 0),
              call("c1", 1, "create", "/c1/d/a"), ack("c1", 1),
              call("c1", 2, "delete", "/c1/d"), ack("c1", 2), final("/c1/d/a"))
    assert check_linearizable(h2).verdict == "not_linearizable"


def test_out_of_budget_is_undecided_never_passing():
    # many concurrent reads of a path whose create is in flight, then an impossible final state:
    # the search must try orders; with 3 steps it cannot finish
    events = [call("c1", 1, "create", "/c1/a")]
    events += [read(f"r{i}", "/c1/a", i % 2 == 0, 0) for i in range(8)]
    events += [ack("c1", 1), final("/c1/a")]
    r = check_linearizable(hist(*events), max_steps=3)
    assert r.verdict == "undecided" and r.undecided
    assert [v.rule for v in linearizability_violations(hist(*events), max_steps=3)] == ["linearizability_undecided"]
    assert check_linearizable(hist(*events)).verdict == "linearizable"


def test_the_search_memoizes_so_many_concurrent_reads_stay_cheap():
    # 14 reads concurrent with one create, then a read that contradicts them all: the orders are 15!
    # (about 10^12); memoized, the configurations are the subsets of reads placed before and after it
    events = [call("c1", 1, "create", "/c1/a")]
    events += [read(f"r{i}", "/c1/a", i % 2 == 0, 0) for i in range(14)]
    events += [ack("c1", 1), read("z", "/c1/a", False, 17), final("/c1/a")]
    r = check_linearizable(hist(*events))
    assert r.verdict == "not_linearizable" and r.steps < 500_000, r.steps


def test_a_violation_names_the_operations():
    vs = linearizability_violations(hist(call("c1", 1, "create", "/c1/a"), ack("c1", 1), final()))
    assert [v.rule for v in vs] == ["not_linearizable"]
    assert "create /c1/a = ok" in vs[0].message and "list / = {}" in vs[0].message


def test_search_of_an_empty_part():
    assert search([], frozenset()).verdict == "linearizable"

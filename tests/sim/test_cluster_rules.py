"""The whole cluster's rules on hand-made histories: every rule can fire, and a clean run passes.

The rules alone (the checker without its linearizability search, which test_linearizability.py tests)."""

import pytest

from qjournal.sim.checker import check
from qjournal.sim.cluster_rules import CLUSTER_RULES
from qjournal.sim.history import (Accepted, ControllerState, Healed, History, NameNodeAck, NamespaceState,
                                  NsRead, OpAcked, OpCalled, OpFailed, Progress, Setup)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def run(events, clock=None):
    h = History(clock or (lambda: 0.0))
    for e in events:
        if isinstance(e, float):
            clock.t = e
            continue
        h.add(e)
    return check(h, linearizability=False)


def rules(vs):
    return sorted({v.rule for v in vs})


def final(*paths, nn="nn1", txid=10, role="active"):
    return NamespaceState(nn, role, txid, tuple(sorted(paths)))


CREATE_A = [OpCalled("c1", 1, "create", "/c1/a"), OpAcked("c1", 1, "nn1")]


def test_a_clean_run_passes():
    assert run([Setup(("j1", "j2", "j3")), *CREATE_A,
                OpCalled("c1", 2, "rename", "/c1/a", "/c1/b"), OpAcked("c1", 2, "nn1"),
                OpCalled("c1", 3, "create", "/c1/x"), OpFailed("c1", 3, "RpcTimeoutError"),
                NsRead("c1", "nn1", "/c1/b", True),
                final("/c1/b")]) == []


@pytest.mark.parametrize("name,events,expected", [
    ("acked create lost", [*CREATE_A, final()], ["op_lost"]),
    ("acked delete undone", [*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"), OpAcked("c1", 2, "nn1", True),
                             final("/c1/a")], ["op_lost"]),
    ("maybe create either way (absent)", [OpCalled("c1", 1, "create", "/c1/a"),
                                          OpFailed("c1", 1, "RpcTimeoutError"), final()], []),
    ("maybe create either way (present)", [OpCalled("c1", 1, "create", "/c1/a"),
                                           OpFailed("c1", 1, "RpcTimeoutError"), final("/c1/a")], []),
    ("invented path", [*CREATE_A, final("/c1/a", "/c1/zzz")], ["op_invented"]),
    ("retried create saw itself", [OpCalled("c1", 1, "create", "/c1/a"),
                                   OpFailed("c1", 1, "FileAlreadyExistsError"), final("/c1/a")], ["not_once"]),
    ("retried delete saw itself", [*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"),
                                   OpAcked("c1", 2, "nn2", False), final()], ["not_once"]),
    ("read then lost", [OpCalled("c1", 1, "create", "/c1/a"), NsRead("c1", "nn1", "/c1/a", True),
                        OpFailed("c1", 1, "RpcTimeoutError"), final()], ["read_lost"]),
    ("read own write missing", [*CREATE_A, NsRead("c1", "nn2", "/c1/a", False), final("/c1/a")],
     ["read_stale"]),
    ("standby differs", [*CREATE_A, final("/c1/a"), final(nn="nn2", role="standby")], ["standby_diverged"]),
    ("standby behind is fine", [*CREATE_A, final("/c1/a"), final(nn="nn2", role="standby", txid=9)], []),
    ("observer differs", [*CREATE_A, final("/c1/a"), final(nn="nn3", role="observer")], ["standby_diverged"]),
    ("observer behind is fine", [*CREATE_A, final("/c1/a"), final(nn="nn3", role="observer", txid=9)], []),
    ("controller out", [ControllerState("nn1", "SERVICE_HEALTHY", "INIT")], ["controller_out"]),
    ("stuck controller: healthy NameNode it believes dead", [ControllerState("nn1", "SERVICE_NOT_RESPONDING",
                                                                             "INIT", True)], ["controller_out"]),
    ("controller of an unhealthy node may be out", [ControllerState("nn1", "SERVICE_NOT_RESPONDING", "INIT",
                                                                    False)], []),
])
def test_each_rule(name, events, expected):
    assert rules(run(events)) == expected


def test_read_went_back_without_a_delete():
    vs = run([OpCalled("c1", 1, "create", "/c1/a"), NsRead("c1", "nn1", "/c1/a", True),
              OpFailed("c1", 1, "RpcTimeoutError"), NsRead("c1", "nn2", "/c1/a", False), final("/c1/a")])
    assert rules(vs) == ["read_stale"]


def test_an_ack_needs_its_edit_on_a_quorum_at_its_epoch():
    setup = Setup(("j1", "j2", "j3"))
    # txid 10 on two of three nodes at epoch 3: an ack with 10 synced is durable
    base = [setup, Accepted("j1", 3, 5, 10), Accepted("j2", 3, 10, 10)]
    assert run(base + [NameNodeAck("nn1", 3, "c1", 1, 10)]) == []
    # on one node only, or at another epoch: not durable
    assert rules(run([setup, Accepted("j1", 3, 5, 10), NameNodeAck("nn1", 3, "c1", 1, 10)])) == ["ack_not_durable"]
    assert rules(run(base + [NameNodeAck("nn1", 2, "c1", 1, 10)])) == ["ack_not_durable"]
    # a late answer of an old epoch, for an edit its quorum accepted before the takeover: fine
    assert run(base + [Accepted("j1", 4, 11, 11), Accepted("j2", 4, 11, 11),
                       NameNodeAck("nn1", 3, "c1", 1, 10)]) == []


def test_liveness_bound():
    c = Clock()
    late = run([Healed(5.0), 10.0, Progress("nn1")], c)
    assert rules(late) == ["no_progress"]
    c = Clock()
    assert run([Healed(5.0), 4.0, Progress("nn1")], c) == []
    assert rules(run([Healed(5.0)])) == ["no_progress"]


def test_every_rule_has_a_case_here():
    import inspect
    src = inspect.getsource(__import__(__name__))
    for rule in CLUSTER_RULES:
        assert f'"{rule}"' in src, rule


def test_a_read_before_a_concurrent_removal_is_not_lost():
    # the delete was called before the read, but was applied after it (its answer came later)
    assert run([*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"), NsRead("c2", "nn1", "/c1/a", True),
                OpFailed("c1", 2, "RpcTimeoutError"), final()]) == []
    assert run([*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"), NsRead("c2", "nn1", "/c1/a", True),
                OpAcked("c1", 2, "nn1", True), final()]) == []
    # a delete acknowledged before the read: the read of "present" was stale
    assert rules(run([*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"), OpAcked("c1", 2, "nn1", True),
                      NsRead("c2", "nn2", "/c1/a", True), final()])) == ["read_stale"]


def _observer_read(client, path, exists, *, session_only=True, call_seq=-1):
    return NsRead(client, "nn3", path, exists, call_seq=call_seq, session_only=session_only)


@pytest.mark.parametrize("name,events,expected", [
    # read-your-writes binds a session-only read
    ("own acked create missing", [*CREATE_A, _observer_read("c1", "/c1/a", False), final("/c1/a")],
     ["read_stale"]),
    ("own acked create seen", [*CREATE_A, _observer_read("c1", "/c1/a", True), final("/c1/a")], []),
    # another client's acknowledged write may be missing from a session-only read ...
    ("other client's acked create not yet seen", [*CREATE_A, _observer_read("c2", "/c1/a", False),
                                                  final("/c1/a")], []),
    # ... but not from a read after an msync (or from the active)
    ("other client's acked create missing after msync", [*CREATE_A,
                                                         _observer_read("c2", "/c1/a", False, session_only=False),
                                                         final("/c1/a")], ["read_stale"]),
    # nothing from the future: a path no operation called before the answer could have made
    ("a path from the future", [_observer_read("c2", "/c1/a", True), *CREATE_A, final("/c1/a")], ["read_stale"]),
    # monotonic reads: seen present, then absent again with no removal
    ("went back in time", [*CREATE_A, _observer_read("c2", "/c1/a", True), _observer_read("c2", "/c1/a", False),
                           final("/c1/a")], ["read_stale"]),
    # a lagging observer may still show another client's path that an acknowledged delete removed
    # (neither lost nor stale), and then catch up
    ("other client's delete not yet seen, then seen", [*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"),
                                                      OpAcked("c1", 2, "nn1", True),
                                                      _observer_read("c2", "/c1/a", True),
                                                      _observer_read("c2", "/c1/a", False), final()], []),
    # ... but the reader's own acknowledged delete binds it
    ("own delete not seen", [*CREATE_A, OpCalled("c1", 2, "delete", "/c1/a"), OpAcked("c1", 2, "nn1", True),
                             _observer_read("c1", "/c1/a", True), final()], ["read_stale"]),
    # a path a session-only read saw, lost without any removal
    ("session read then lost", [OpCalled("c1", 1, "create", "/c1/a"), _observer_read("c2", "/c1/a", True),
                                OpFailed("c1", 1, "RpcTimeoutError"), final()], ["read_lost"]),
])
def test_session_only_reads(name, events, expected):
    assert rules(run(events)) == expected


def test_a_write_acknowledged_while_the_read_was_in_flight_need_not_show():
    # c2's read was sent (call_seq 1) before c1's create was acknowledged (seq 1): either answer is linearizable
    events = [OpCalled("c1", 1, "create", "/c1/a"), OpAcked("c1", 1, "nn1")]
    assert run([*events, NsRead("c2", "nn1", "/c1/a", False, call_seq=1), final("/c1/a")]) == []
    # sent after the acknowledgement, it must see the path
    assert rules(run([*events, NsRead("c2", "nn1", "/c1/a", False, call_seq=2), final("/c1/a")])) == ["read_stale"]

"""The whole-cluster checker on hand-made histories: every rule can fire, and a clean run passes."""

import pytest

from qjournal.sim.cluster_checker import CLUSTER_RULES, check_cluster
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
    return check_cluster(h)


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
    ("controller out", [ControllerState("nn1", "SERVICE_HEALTHY", "INIT")], ["controller_out"]),
    ("controller of an unhealthy node may be out", [ControllerState("nn1", "SERVICE_NOT_RESPONDING", "INIT")],
     []),
])
def test_each_rule(name, events, expected):
    assert rules(run(events)) == expected


def test_read_went_back_without_a_delete():
    vs = run([OpCalled("c1", 1, "create", "/c1/a"), NsRead("c1", "nn1", "/c1/a", True),
              OpFailed("c1", 1, "RpcTimeoutError"), NsRead("c1", "nn2", "/c1/a", False), final("/c1/a")])
    assert rules(vs) == ["read_stale"]


def test_ack_after_a_higher_epoch_had_a_quorum():
    base = [Setup(("j1", "j2", "j3")), Accepted("j1", 3, 10, 10), Accepted("j2", 3, 10, 10)]
    assert rules(run(base + [NameNodeAck("nn1", 2, "c1", 1)])) == ["ack_after_fenced"]
    # before the quorum of epoch 3 (only one node accepted it): fine
    assert run([Setup(("j1", "j2", "j3")), Accepted("j1", 3, 10, 10), NameNodeAck("nn1", 2, "c1", 1)]) == []
    # the same epoch, or a newer one acking: fine
    assert run(base + [NameNodeAck("nn2", 3, "c1", 1)]) == []


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

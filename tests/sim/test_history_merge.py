"""Histories recorded apart (client processes on their own hosts) merged on one clock."""

from __future__ import annotations

import json

from qjournal.sim.history import (Fault, History, NamespaceState, NsRead, OpAcked, OpCalled, Written,
                                  event_from_jsonable, merge_histories)


def _clock(*times):
    it = iter(times)
    return lambda: next(it)


def test_events_survive_the_json_lines_round_trip():
    h = History(clock=_clock(1.0, 2.0, 3.0, 4.0))
    h.add(OpCalled("c", 0, "rename", "/c/a", "/c/b"))
    h.add(NsRead("c", "nn1", "/c/b", True, call_seq=0, session_only=True, call_time=1.5))
    h.add(NamespaceState("nn1", "active", 7, ("/c", "/c/b")))
    h.add(Written("w", 1, 5, b"\x00\xff"))
    back = [event_from_jsonable(json.loads(line)) for line in h.to_jsonl().splitlines()]
    assert back == h.events


def test_merge_orders_by_time_and_rebuilds_each_reads_call_seq():
    client1 = History(clock=_clock(1.0, 4.0, 6.0))
    client1.add(OpCalled("a", 0, "create", "/a/f"))
    client1.add(OpAcked("a", 0, "nn1"))
    client1.add(NsRead("a", "nn1", "/b/g", True, call_seq=2, call_time=5.0))   # sent at 5.0, answered at 6.0
    client2 = History(clock=_clock(2.0, 4.5))
    client2.add(OpCalled("b", 0, "create", "/b/g"))
    client2.add(OpAcked("b", 0, "nn1"))
    faults = [Fault("kill", "nn2", time=3.0)]
    m = merge_histories([client1.events, client2.events, faults])
    assert [(type(e).__name__, e.time) for e in m] == [
        ("OpCalled", 1.0), ("OpCalled", 2.0), ("Fault", 3.0), ("OpAcked", 4.0), ("OpAcked", 4.5), ("NsRead", 6.0)]
    assert [e.seq for e in m] == list(range(6))
    read = m.of(NsRead)[0]
    assert read.call_seq == 5            # both acknowledgements happened before the read was sent
    assert m.now() == 6.0

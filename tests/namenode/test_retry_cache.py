"""Retry cache: hits, method mismatch, expiry, size bound, rebuild from ops equals the live answer."""

import pytest

from qjournal.errors import InvariantViolation
from qjournal.namenode.namespace import CallContext, Namespace
from qjournal.namenode.ops import NO_CLIENT_ID, encode_body
from qjournal.namenode.retry_cache import RetryCache, answer_from_ops

C1, C2 = b"\x01" * 16, b"\x02" * 16


def test_hit_miss_and_method_must_match():
    rc = RetryCache(expiry_ms=1000, max_entries=10)
    rc.record(C1, 1, "create", {"x": 1}, now_ms=0)
    assert rc.lookup(C1, 1, "create", 10) == (True, {"x": 1})
    assert rc.lookup(C1, 1, "delete", 10) == (False, None)
    assert rc.lookup(C2, 1, "create", 10) == (False, None)
    assert rc.lookup(C1, 2, "create", 10) == (False, None)
    assert rc.hits == 1


def test_expiry_and_bound_and_uncacheable():
    rc = RetryCache(expiry_ms=100, max_entries=3)
    for i in range(5):
        rc.record(C1, i, "delete", True, now_ms=i)
    assert len(rc) == 3 and rc.lookup(C1, 0, "delete", 5)[0] is False
    assert rc.lookup(C1, 4, "delete", 100)[0] is True
    assert rc.lookup(C1, 4, "delete", 104)[0] is False  # expired
    rc.record(NO_CLIENT_ID, 1, "delete", True, 0)
    rc.record(C2, -2, "delete", True, 0)
    assert len(rc) == 0


def test_rebuilt_entries_answer_like_the_active():
    ns = Namespace(superuser="nn")
    ctx = CallContext("nn", (), C1, 7, ts=5)
    ops = ns.create(ctx, "/f", perm=0o600, replication=2)
    live = answer_from_ops("create", ops)
    assert live == ns.get_file_info(ctx, "/f")  # the answer is the file's status
    standby, replay = RetryCache(), RetryCache()
    for op in ops:
        standby.record_op(op, now_ms=0)
        replay.record_op(op, 0, encode_body(op))  # the tailer passes the record body
    assert standby.lookup(C1, 7, "create", 1) == (True, live)
    assert replay.lookup(C1, 7, "create", 1) == (True, live)
    with pytest.raises(InvariantViolation):
        replay.record(C1, 8, "create", encode_body(ops[0]), 0)
    ops2 = ns.mkdirs(CallContext("nn", (), C2, 3, ts=6), "/a/b/c")
    for op in ops2:
        standby.record_op(op, 0)
    assert standby.lookup(C2, 3, "mkdirs", 1) == (True, True)


def test_any_client_id_length_and_call_id_are_keys_of_their_own():
    """16-byte ids and call ids below 2**64 share one key form, every other shape another: no two calls meet."""
    rc = RetryCache(expiry_ms=1000, max_entries=10)
    calls = [(C1, 1), (C1, 2 ** 64 + 1), (C1[:8], 1), (C1 + b"\x00", 1), (C1 + (1).to_bytes(8, "big"), 0)]
    for i, (cid, call) in enumerate(calls):
        rc.record(cid, call, "delete", i == 0, now_ms=0)
    for i, (cid, call) in enumerate(calls):
        assert rc.lookup(cid, call, "delete", 1) == (True, i == 0)
    assert len(rc) == len(calls)


def test_a_packed_create_answers_its_first_status_and_the_first_entry_stays():
    """The active records a create's entry from its op (``record_ops``): the answer it gives back equals the
    answer the call got, for any path (unicode included), owner and group."""
    rc = RetryCache(expiry_ms=1000, max_entries=10)
    ns = Namespace(superuser="nn")
    ns.mkdirs(CallContext("nn", (), C1, 1, ts=1), "/d/é 日本")
    ctx = CallContext("nn", (), C1, 2, ts=5)
    ops = ns.create(ctx, "/d/é 日本/f\\x", perm=0o640, replication=5, block_size=1 << 20)
    key = rc.key(C1, 2)
    rc.record_ops(key, "create", ops, 5)
    assert rc.lookup(C1, 2, "create", 6) == (True, answer_from_ops("create", ops))
    assert rc.lookup(C1, 2, "mkdirs", 6) == (False, None)
    ns.set_permission(ctx, "/d/é 日本/f\\x", 0o600)  # the file changes: the retry still gets the first answer
    rc.record_ops(key, "create", ns.create(CallContext("nn", (), C1, 3, ts=7), "/other"), 7)  # the same key
    first = rc.lookup(C1, 2, "create", 8)[1]
    assert first["permission"] == 0o640 and first["path"] == "/d/é 日本/f\\x"
    rc.record_ops(rc.key(C2, 1), "mkdirs", ns.mkdirs(CallContext("nn", (), C2, 1, ts=7), "/a/b"), 7)
    rc.record_ops(rc.key(C2, 2), "delete", [], 7)
    assert rc.lookup(C2, 1, "mkdirs", 8) == (True, True) and rc.lookup(C2, 2, "delete", 8) == (True, True)
    assert rc.lookup(C1, 2, "create", 1005) == (False, None)  # expired, in recording order
    assert rc.lookup(C2, 1, "mkdirs", 1006) == (True, True)
    assert rc.lookup(C2, 1, "mkdirs", 1007) == (False, None) and len(rc) == 0

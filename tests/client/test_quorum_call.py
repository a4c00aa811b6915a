"""QuorumCall against hand-completed futures: win/lose/timeout, error reports, invariant re-raise."""

import asyncio

import pytest

from qjournal.client.quorum_call import QuorumCall
from qjournal.errors import (EpochError, FencedError, InvariantViolation, QuorumError,
                             RpcTimeoutError, TransportError)
from qjournal.protocol.quorum import all_rule, majority_rule


def run(coro):
    return asyncio.run(coro)


# (answers per node in completion order: value or exception, rule, expected: dict of successes or
# exception type)
TABLE = [
    ("majority of 3 wins", [("a", 1), ("b", 2)], "majority", {"a": 1, "b": 2}),
    ("one failure still wins", [("a", TransportError("down")), ("b", 2), ("c", 3)], "majority", {"b": 2, "c": 3}),
    ("two failures lose", [("a", TransportError("x")), ("b", TransportError("y"))], "majority", QuorumError),
    ("epoch refusal loses as fenced", [("a", EpochError("epoch 1 < 2")), ("b", EpochError("epoch 1 < 2"))], "majority", FencedError),
    ("all rule needs every node", [("a", 1), ("b", 1), ("c", 1)], "all", {"a": 1, "b": 1, "c": 1}),
    ("all rule loses on one error", [("a", 1), ("b", TransportError("x")), ("c", 1)], "all", QuorumError),
    ("invariant from a minority beats a quorum", [("a", 1), ("c", InvariantViolation("bad")), ("b", 1)], "all", InvariantViolation),
]


@pytest.mark.parametrize("name,answers,rule,expected", TABLE, ids=[t[0] for t in TABLE])
def test_quorum_call_table(name, answers, rule, expected):
    async def main():
        loop = asyncio.get_running_loop()
        futs = {n: loop.create_future() for n in ("a", "b", "c")}
        call = QuorumCall(futs, "journal", "jid1")
        r = majority_rule(3) if rule == "majority" else all_rule(3)

        async def feed():
            for node, v in answers:
                await asyncio.sleep(0)
                if isinstance(v, BaseException):
                    futs[node].set_exception(v)
                else:
                    futs[node].set_result(v)
        feeder = asyncio.ensure_future(feed())
        try:
            return await call.wait(r, 5000)
        finally:
            await feeder
    if isinstance(expected, dict):
        assert run(main()) == expected
    else:
        with pytest.raises(expected):
            run(main())


def test_invariant_reraised_even_after_quorum_seen():
    async def main():
        loop = asyncio.get_running_loop()
        futs = {n: loop.create_future() for n in ("a", "b", "c")}
        futs["a"].set_exception(InvariantViolation("would discard committed txn"))
        futs["b"].set_result(None)
        futs["c"].set_result(None)
        call = QuorumCall(futs, "accept_recovery", "j")
        await call.wait(majority_rule(3), 1000)
    with pytest.raises(InvariantViolation, match="would discard committed txn"):
        run(main())


def test_quorum_error_lists_every_node_in_order():
    async def main():
        loop = asyncio.get_running_loop()
        futs = {n: loop.create_future() for n in ("c", "a", "b")}
        futs["c"].set_exception(TransportError("refused"))
        futs["a"].set_exception(TransportError("reset"))
        call = QuorumCall(futs, "start_log_segment", "myjournal")
        await call.wait(majority_rule(3), 1000)
    with pytest.raises(QuorumError) as ei:
        run(main())
    msg = str(ei.value)
    assert "start_log_segment" in msg and "'myjournal'" in msg
    assert msg.index("a: TransportError: reset") < msg.index("b: no answer") < msg.index("c: TransportError: refused")
    assert set(ei.value.fields["errors"]) == {"a", "c"}


def test_timeout_names_op_and_answers():
    async def main():
        loop = asyncio.get_running_loop()
        futs = {n: loop.create_future() for n in ("a", "b", "c")}
        futs["a"].set_result(None)
        call = QuorumCall(futs, "new_epoch", "j")
        await call.wait(majority_rule(3), 20)
    with pytest.raises(RpcTimeoutError) as ei:
        run(main())
    assert "new_epoch" in str(ei.value) and "a: ok" in str(ei.value) and "b: no answer" in str(ei.value)


def test_returns_at_majority_without_waiting_for_straggler():
    async def main():
        loop = asyncio.get_running_loop()
        never = loop.create_future()  # a dead node: never answers
        done1, done2 = loop.create_future(), loop.create_future()
        done1.set_result("x")
        done2.set_result("y")
        call = QuorumCall({"a": done1, "b": done2, "c": never}, "journal", "j")
        # a generous timeout: the call must return at once, not at the deadline
        t0 = loop.time()
        res = await call.wait(majority_rule(3), 60_000)
        assert loop.time() - t0 < 30  # returned long before the deadline
        never.cancel()
        return res
    assert run(main()) == {"a": "x", "b": "y"}


def test_wait_rule_size_must_match():
    async def main():
        loop = asyncio.get_running_loop()
        call = QuorumCall({"a": loop.create_future()}, "x", "j")
        await call.wait(majority_rule(3), 10)
    with pytest.raises(InvariantViolation):
        run(main())


def test_slow_wait_logs_progress_naming_who_answered(caplog):
    import logging

    async def main():
        loop = asyncio.get_running_loop()
        futs = {n: loop.create_future() for n in ("a", "b", "c")}
        futs["a"].set_result(None)
        call = QuorumCall(futs, "journal", "j")
        with pytest.raises(RpcTimeoutError):
            await call.wait(majority_rule(3), 50)
    with caplog.at_level(logging.INFO, logger="qjournal.client.quorum_call"):
        asyncio.run(main())
    msgs = [r.getMessage() for r in caplog.records]
    assert any("waited" in m and "timeout=50 ms" in m and "a: ok" in m and "b: no answer" in m for m in msgs), msgs

"""The rule that turns several JournalNodes' edit-cache answers into what a tailer may apply."""

import asyncio

import pytest

from qjournal.client.rpc_reader import ChosenEdits, RpcEditLogInputStream, choose_journaled_edits
from qjournal.errors import CacheMissError, InvariantViolation
from qjournal.protocol.messages import JournaledEdits
from qjournal.protocol.segment import encode_records, iter_records


def answer(since: int, last: int, committed: int | None = None, tag: bytes = b"a") -> JournaledEdits:
    recs = encode_records([(t, 1, tag + b"%d" % t) for t in range(since, last + 1)])
    return JournaledEdits(since, last - since + 1, recs, committed_txid=last if committed is None else committed)


def txids(records: bytes) -> list[int]:
    return [r.txid for r in iter_records(records, 0)]


@pytest.mark.parametrize("lasts, majority, want_last", [
    ([20, 20, 20], 2, 20),
    ([20, 15, 12], 2, 15),   # the highest txid two of three hold
    ([20, 15], 2, 15),       # only a majority answered
    ([30, 9, 25, 25, 9], 3, 25),
    ([9, 9, 9], 2, 9),       # nothing new anywhere: empty
])
def test_majority_th_highest(lasts, majority, want_last):
    answers = {f"jn{i}": answer(10, last) for i, last in enumerate(lasts)}
    got = choose_journaled_edits(answers, 10, majority, 5000, "j")
    assert got.last_txid == want_last
    assert txids(got.records) == list(range(10, want_last + 1))


def test_a_lagging_minority_never_adds_an_edit_a_majority_lacks():
    # jn0 alone is far ahead: nothing past what jn1 and jn2 hold is returned
    answers = {"jn0": answer(10, 500), "jn1": answer(10, 12), "jn2": answer(10, 11)}
    assert choose_journaled_edits(answers, 10, 2, 5000, "j").last_txid == 12


def test_fewer_answers_than_a_majority_is_a_miss():
    with pytest.raises(CacheMissError, match="a majority is 2"):
        choose_journaled_edits({"jn0": answer(10, 20)}, 10, 2, 5000, "j")


def test_committed_edits_a_majority_cannot_serve_are_a_miss():
    # jn1 and jn2 know txids up to 40 are committed but their caches hold nothing from 10
    answers = {"jn0": answer(10, 40), "jn1": answer(10, 9, committed=40), "jn2": answer(10, 9, committed=40)}
    with pytest.raises(CacheMissError, match="committed"):
        choose_journaled_edits(answers, 10, 2, 5000, "j")


def test_different_bytes_for_a_committed_txid_is_a_broken_invariant():
    answers = {"jn0": answer(10, 20, tag=b"a"), "jn1": answer(10, 20, tag=b"b")}
    with pytest.raises(InvariantViolation, match="different bytes"):
        choose_journaled_edits(answers, 10, 2, 5000, "j")


def test_an_answer_from_another_txid_is_a_broken_invariant():
    answers = {"jn0": answer(10, 20), "jn1": answer(11, 20)}
    with pytest.raises(InvariantViolation, match="asked from 10"):
        choose_journaled_edits(answers, 10, 2, 5000, "j")


def test_full_answers_are_flagged():
    answers = {"jn0": answer(10, 19), "jn1": answer(10, 19)}
    assert choose_journaled_edits(answers, 10, 2, 10, "j").full
    assert not choose_journaled_edits(answers, 10, 2, 11, "j").full


def chosen(first: int, last: int, full: bool, extra: int = 0) -> ChosenEdits:
    recs = encode_records([(t, 1, b"e%d" % t) for t in range(first, last + 1 + extra)])
    return ChosenEdits(first, last, recs, full)


def test_the_stream_asks_for_the_next_round_while_the_current_one_is_read():
    asked: list[int] = []
    blocked = asyncio.Event()
    asked_more = asyncio.Event()

    async def fetch_more(since: int) -> ChosenEdits:
        asked.append(since)
        asked_more.set()
        if since > 30:
            await blocked.wait()  # a round that never comes: close() must cancel it
        return chosen(since, since + 9, full=True)

    async def until_asked(n: int) -> None:
        """Until the stream asked for ``n`` rounds (the round ahead runs in its own task)."""
        while len(asked) < n:
            asked_more.clear()
            await asked_more.wait()

    async def main():
        s = RpcEditLogInputStream("j", chosen(1, 10, full=True), fetch_more)
        first = await s.read_batch(4)
        await asyncio.wait_for(until_asked(1), 10)
        assert [r.txid for r in first] == [1, 2, 3, 4] and asked == [11]
        got = [r.txid for r in first]
        while len(got) < 30:
            got += [r.txid for r in await s.read_batch(7)]
        await asyncio.wait_for(until_asked(3), 10)
        assert got == list(range(1, 31)) and asked == [11, 21, 31]
        ahead = s._ahead
        await s.close()
        assert ahead is not None and ahead.cancelled()
    asyncio.run(main())


def test_an_answer_holding_records_past_its_chosen_last_txid_is_a_broken_invariant():
    async def main():
        s = RpcEditLogInputStream("j", chosen(1, 5, full=False, extra=1), lambda since: None)
        assert [r.txid for r in await s.read_batch(100)] == [1, 2, 3, 4, 5]
        with pytest.raises(InvariantViolation, match="bytes after its last txid 5"):
            await s.read_batch(100)
    asyncio.run(main())

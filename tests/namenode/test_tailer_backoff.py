"""The tailer's wait between rounds (dfs.ha.tail-edits.period and .period.backoff-max)."""

import asyncio

import pytest

from qjournal.namenode.namespace import Namespace
from qjournal.namenode.retry_cache import RetryCache
from qjournal.namenode.tailer import EditLogTailer


def tailer(period_ms: int, backoff_max_ms: int) -> EditLogTailer:
    return EditLogTailer(Namespace(), RetryCache(1000, 10), asyncio.Lock(), 0, lambda: 0, period_ms,
                         backoff_max_ms=backoff_max_ms)


@pytest.mark.parametrize("period, backoff_max, applied, want", [
    (10, 0, [0, 0, 0], [10, 10, 10]),              # no back-off configured
    (10, 10, [0, 0], [10, 10]),                    # a ceiling not above the period: none
    (10, 100, [0, 0, 0, 0, 0], [20, 40, 80, 100, 100]),
    (10, 100, [0, 0, 5, 0], [20, 40, 10, 20]),     # progress goes back to the period
    (0, 8, [0, 0, 0, 0, 0], [1, 2, 4, 8, 8]),      # a zero period backs off from 1 ms
])
def test_backoff_table(period, backoff_max, applied, want):
    t = tailer(period, backoff_max)
    got = []
    for n in applied:
        t.sleep_ms = t.next_sleep_ms(n)
        got.append(t.sleep_ms)
    assert got == want

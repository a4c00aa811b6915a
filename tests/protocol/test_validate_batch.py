"""The journal hot-path validator accepts exactly what ``segment.scan_batch`` accepts."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from qjournal.errors import CorruptRecordError
from qjournal.protocol.segment import validate_batch
from qjournal.protocol.segment import encode_records, scan_batch

MAX = 1000


def reference(buf, first, n):
    try:
        return scan_batch(buf, first, n, max_record_bytes=MAX)
    except CorruptRecordError:
        return None


@st.composite
def batches(draw):
    first = draw(st.integers(1, 10**12))
    n = draw(st.integers(0, 8))
    bodies = [draw(st.binary(max_size=40)) for _ in range(n)]
    ops = [draw(st.integers(1, 254)) for _ in range(n)]
    buf = bytearray(encode_records([(first + i, ops[i], bodies[i]) for i in range(n)]))
    damage = draw(st.sampled_from(["none", "flip", "cut", "extra", "count", "first"]))
    claimed_first, claimed_n = first, n
    if damage == "flip" and buf:
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] ^= 1 << draw(st.integers(0, 7))
    elif damage == "cut" and buf:
        del buf[draw(st.integers(0, len(buf) - 1)):]
    elif damage == "extra":
        buf += draw(st.binary(min_size=1, max_size=20))
    elif damage == "count":
        claimed_n = n + draw(st.sampled_from([-1, 1]))
    elif damage == "first":
        claimed_first = first + draw(st.sampled_from([-1, 1]))
    return bytes(buf), claimed_first, claimed_n


@settings(max_examples=400, deadline=None)
@given(batches())
def test_same_verdict_as_scan_batch(case):
    buf, first, n = case
    assert validate_batch(buf, first, n, MAX) == reference(buf, first, n)


def test_oversized_record_refused():
    buf = encode_records([(5, 1, b"x" * (MAX + 1))], max_record_bytes=MAX + 1)
    assert validate_batch(buf, 5, 1, MAX) is None and reference(buf, 5, 1) is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_single_bit_flip_refused(seed):
    rng = random.Random(seed)
    print("seed", seed)
    buf = encode_records([(t, 1, bytes(rng.randrange(256) for _ in range(rng.randrange(30))))
                          for t in range(7, 12)])
    assert validate_batch(buf, 7, 5, MAX) == 11
    for i in range(len(buf)):
        bad = bytearray(buf)
        bad[i] ^= 1 << rng.randrange(8)
        assert validate_batch(bytes(bad), 7, 5, MAX) == reference(bytes(bad), 7, 5)

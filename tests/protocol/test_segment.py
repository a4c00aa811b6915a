"""The segment format (protocol/segment.py): codec round trip, damage detection, scanner, names.

Hypothesis properties: any list of records round-trips; any single flipped bit
or truncation of a segment image is detected and never yields a wrong record.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qjournal.errors import CorruptRecordError, CorruptSegmentError, RecordTooLargeError
from qjournal.protocol import segment as seg

bodies = st.lists(st.binary(max_size=64), min_size=1, max_size=12)
opcodes = st.integers(min_value=1, max_value=0xFE)


def image(first_txid: int, payloads: list[bytes], opcode: int = seg.OP_DATA) -> tuple[bytes, list[seg.EditRecord]]:
    recs = [seg.EditRecord(first_txid + i, opcode, b) for i, b in enumerate(payloads)]
    return seg.encode_header() + seg.encode_records(recs), recs


def strip(recs):
    return [(r.txid, r.opcode, r.body) for r in recs]


@settings(max_examples=150, deadline=None, print_blob=True)
@given(first=st.integers(min_value=0, max_value=2 ** 40), payloads=bodies, opcode=opcodes)
def test_codec_round_trips(first, payloads, opcode):
    buf, recs = image(first, payloads, opcode)
    got = list(seg.iter_records(buf))
    assert strip(got) == strip(recs)
    for g in got:
        assert g.checksum == seg.crc32c(g.encode()[:-4])
    r = seg.scan_segment(buf, expected_first_txid=first)
    assert r.clean and r.num_records == len(recs) and r.last_txid == first + len(recs) - 1
    assert r.valid_length == len(buf)
    assert seg.scan_batch(buf[seg.HEADER_SIZE:], first, len(recs)) == first + len(recs) - 1


def _check_damaged(buf: bytes, original: list[seg.EditRecord]) -> None:
    """Whatever a reader returns from a damaged image is a prefix of the original records."""
    want = strip(original)
    got = []
    try:
        for r in seg.iter_records(buf, allow_torn_tail=True):
            got.append((r.txid, r.opcode, r.body))
    except (CorruptRecordError, CorruptSegmentError):
        pass
    assert got == want[:len(got)], "a reader returned a record that was never written"
    r = seg.scan_segment(buf)
    if r.header_ok:
        assert r.num_records <= len(want)
        prefix = list(seg.iter_records(buf[:r.valid_length]))
        assert strip(prefix) == want[:r.num_records]


@settings(max_examples=200, deadline=None, print_blob=True)
@given(payloads=bodies, data=st.data())
def test_single_bit_flip_is_detected(payloads, data):
    buf, recs = image(1, payloads)
    pos = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="byte")
    bit = data.draw(st.integers(min_value=0, max_value=7), label="bit")
    damaged = bytearray(buf)
    damaged[pos] ^= 1 << bit
    damaged = bytes(damaged)
    _check_damaged(damaged, recs)
    r = seg.scan_segment(damaged, expected_first_txid=1)
    # the flip is always noticed: the scan is not a clean, complete read of every record
    assert not (r.clean and r.num_records == len(recs) and r.header_ok)
    if pos < seg.HEADER_SIZE:  # magic, version and the header checksum are all covered
        with pytest.raises(CorruptSegmentError):
            seg.decode_header(damaged)


@settings(max_examples=150, deadline=None, print_blob=True)
@given(payloads=bodies, data=st.data())
def test_truncation_is_detected(payloads, data):
    buf, recs = image(5, payloads)
    cut = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="cut")
    damaged = buf[:cut]
    _check_damaged(damaged, recs)
    r = seg.scan_segment(damaged, expected_first_txid=5)
    if r.header_ok:
        assert r.num_records < len(recs)
        # the valid prefix is exactly the records that fit completely
        ends = [seg.HEADER_SIZE]
        for rec in recs:
            ends.append(ends[-1] + len(rec.encode()))
        complete = max(i for i, e in enumerate(ends) if e <= cut)
        assert r.num_records == complete and r.valid_length == ends[complete]


def _one_by_one(buf, offset: int, max_records: int, max_record_bytes: int, expected):
    """decode_records' contract, spelt out with try_decode one record at a time."""
    out = []
    while len(out) < max_records:
        d = seg.try_decode(buf, offset, max_record_bytes)
        if d.status != seg.OK or (expected is not None and d.record.txid != expected + len(out)):
            break
        out.append(d.record)
        offset = d.next_offset
    return out, offset


@settings(max_examples=300, deadline=None, print_blob=True)
@given(payloads=bodies, data=st.data())
def test_batch_decoder_takes_exactly_what_try_decode_takes(payloads, data):
    """decode_records (the replay's batch decoder) and valid_run (the scans') agree with try_decode on
    damaged, truncated, padded and mis-numbered buffers, in bytes and in bytearrays, for any batch size."""
    buf, recs = image(3, payloads)
    damaged = bytearray(buf)
    how = data.draw(st.sampled_from(["none", "flip", "cut", "pad", "gap", "limit"]), label="damage")
    max_record_bytes = seg.DEFAULT_MAX_RECORD_BYTES
    if how == "flip":
        pos = data.draw(st.integers(min_value=seg.HEADER_SIZE, max_value=len(buf) - 1), label="byte")
        damaged[pos] ^= 1 << data.draw(st.integers(min_value=0, max_value=7), label="bit")
    elif how == "cut":
        del damaged[data.draw(st.integers(min_value=seg.HEADER_SIZE, max_value=len(buf)), label="cut"):]
    elif how == "pad":
        damaged += data.draw(st.sampled_from([b"\x00" * 5, b"\xff", b"\x00junk"]), label="pad")
    elif how == "gap":
        damaged = bytearray(seg.encode_header() + seg.encode_records(
            [seg.EditRecord(3 + i + (i >= len(recs) // 2), seg.OP_DATA, b) for i, b in enumerate(payloads)]))
    elif how == "limit":
        max_record_bytes = data.draw(st.integers(min_value=0, max_value=64), label="max_record_bytes")
    expected = data.draw(st.sampled_from([None, 3, 4]), label="expected_txid")
    max_records = data.draw(st.integers(min_value=1, max_value=len(recs) + 2), label="max_records")
    for b in (bytes(damaged), damaged):
        got, off = seg.decode_records(b, seg.HEADER_SIZE, max_records, max_record_bytes, expected)
        want, want_off = _one_by_one(b, seg.HEADER_SIZE, max_records, max_record_bytes, expected)
        assert got == want and off == want_off
        assert all(type(r.body) is bytes for r in got)
        if expected is not None:  # the scans' count-only form takes the same run
            assert seg.valid_run(b, seg.HEADER_SIZE, max_records, max_record_bytes, expected) == (len(got), off)


def test_padding_ends_log_cleanly_and_garbage_after_it_is_reported():
    buf, recs = image(1, [b"a", b"b"])
    assert seg.scan_segment(buf + b"\x00" * 64).clean
    assert seg.scan_segment(buf + b"\xff" * 64).clean
    r = seg.scan_segment(buf + b"\x00" * 8 + b"junk")
    assert [p.kind for p in r.problems] == ["trailing-garbage"] and r.num_records == 2


def test_txid_gap_ends_the_valid_prefix():
    recs = [seg.EditRecord(1, 1, b"a"), seg.EditRecord(2, 1, b"b"), seg.EditRecord(4, 1, b"d")]
    buf = seg.encode_header() + seg.encode_records(recs)
    r = seg.scan_segment(buf)
    assert r.last_txid == 2 and r.problems[0].kind == "txid-gap"
    assert seg.scan_segment(buf, expected_first_txid=7).num_records == 0


def test_corrupt_middle_reports_unreachable_later_records():
    buf, recs = image(1, [b"aaaa", b"bbbb", b"cccc"])
    off = seg.HEADER_SIZE + len(recs[0].encode()) + seg.REC_HEAD_SIZE  # first body byte of txid 2
    damaged = bytearray(buf)
    damaged[off] ^= 0x40
    r = seg.scan_segment(bytes(damaged))
    assert r.last_txid == 1
    assert r.problems[0].kind == "corrupt" and "checksum" in r.problems[0].detail
    assert any("txid 3 is unreachable" in p.detail for p in r.problems)
    with pytest.raises(CorruptRecordError) as ei:
        list(seg.iter_records(bytes(damaged), where="f"))
    assert ei.value.fields["offset"] == seg.HEADER_SIZE + len(recs[0].encode())


def test_stop_after_txid_ignores_bytes_after_the_end():
    buf, _ = image(1, [b"a", b"b", b"c"])
    r = seg.scan_segment(buf + b"garbage", stop_after_txid=2)
    assert r.last_txid == 2 and r.clean


def test_record_limits_and_reserved_opcodes():
    with pytest.raises(RecordTooLargeError):
        seg.encode_record(1, 1, b"x" * 11, max_record_bytes=10)
    for op in (0x00, 0xFF, 0x100, -1):
        with pytest.raises(ValueError):
            seg.encode_record(1, op, b"")
    with pytest.raises(ValueError):
        seg.encode_record(-1, 1, b"")
    buf, _ = image(1, [b"x" * 100])
    with pytest.raises(CorruptRecordError, match="over the maximum record size"):
        list(seg.iter_records(buf, max_record_bytes=50))


def test_scan_batch_refuses_wrong_count_txids_and_padding():
    recs = [seg.EditRecord(10 + i, 1, b"x") for i in range(3)]
    batch = seg.encode_records(recs)
    with pytest.raises(CorruptRecordError, match="holds 3 records, the call said 4"):
        seg.scan_batch(batch, 10, 4)
    with pytest.raises(CorruptRecordError, match="has txid 10, expected 11"):
        seg.scan_batch(batch, 11, 3)
    with pytest.raises(CorruptRecordError, match="reserved opcode"):
        seg.scan_batch(batch + b"\x00" * 20, 10, 3)
    with pytest.raises(CorruptRecordError, match="truncated"):
        seg.scan_batch(batch[:-1], 10, 3)


def test_bad_header():
    bad_version = bytearray(seg.encode_header(1))
    bad_version[11] ^= 0x02  # version 1 -> 3: only the header checksum can tell
    with pytest.raises(CorruptSegmentError, match="header checksum mismatch"):
        seg.decode_header(bytes(bad_version))
    assert seg.decode_header(seg.encode_header(7)) == 7
    with pytest.raises(CorruptSegmentError, match="header truncated"):
        seg.decode_header(b"QJED")
    with pytest.raises(CorruptSegmentError, match="bad magic"):
        seg.decode_header(b"X" * 16)
    r = seg.scan_segment(b"NOTASEGMENTATALL")
    assert not r.header_ok and r.problems[0].kind == "bad-header"


@pytest.mark.parametrize("name,expect", [
    ("edits_0000000000000000001-0000000000000000100", (1, 100)),
    ("edits_inprogress_0000000000000000101", (101, None)),
    ("edits_inprogress_0000000000000000101.empty", None),
    ("edits_1-100", None),
    ("VERSION", None),
])
def test_file_names(name, expect):
    p = seg.parse_segment_file_name(name)
    assert (p and (p.start_txid, p.end_txid)) == (expect or None) if expect else p is None
    if expect:
        assert seg.segment_file_name(*expect) == name

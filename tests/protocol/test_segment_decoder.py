"""The incremental segment decoder (protocol/segment.py invariant 4): chunked decoding equals whole-image
decoding, whatever the chunk boundaries, and holds no more than a chunk plus one record.

Hypothesis property: for any segment image, damaged or not, and any cutting of it into chunks,
``scan_segment_chunks`` finds the valid prefix, txids, digest and first problem kind that
``scan_segment`` finds on the whole image.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qjournal.errors import CorruptRecordError, CorruptSegmentError
from qjournal.protocol import segment as seg


def image(first_txid: int, payloads: list[bytes]) -> bytes:
    return seg.encode_header() + seg.encode_records(
        [seg.EditRecord(first_txid + i, seg.OP_DATA, b) for i, b in enumerate(payloads)])


def cut(buf: bytes, sizes: list[int]) -> list[bytes]:
    out, i, k = [], 0, 0
    while i < len(buf):
        n = sizes[k % len(sizes)]
        out.append(buf[i:i + n])
        i += n
        k += 1
    return out


def damaged(buf: bytes, damage: tuple[int, int] | None) -> bytes:
    """``buf`` with bit ``bit`` of byte ``at`` flipped, or cut at ``at`` when ``bit`` is -1 (``damage``: ``(at, bit)``)."""
    out = bytearray(buf)
    if damage is not None:
        at, bit = damage
        at %= len(out)
        if bit < 0:
            del out[at:]  # truncation
        else:
            out[at] ^= 1 << bit
    return bytes(out)


@settings(max_examples=300, deadline=None, print_blob=True)
@given(payloads=st.lists(st.binary(max_size=80), min_size=0, max_size=10),
       sizes=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=5),
       damage=st.one_of(st.none(), st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=7)),
                        st.tuples(st.integers(min_value=0), st.just(-1))),
       tail=st.sampled_from([b"", b"\x00" * 9, b"\xff\x00\xff", b"\x00\x00x", b"\x01\x02"]),
       stop=st.one_of(st.none(), st.integers(min_value=1, max_value=12)))
def test_chunked_scan_equals_whole_scan(payloads, sizes, damage, tail, stop):
    buf = damaged(image(1, payloads) + tail, damage)
    whole = seg.scan_segment(buf, expected_first_txid=1, stop_after_txid=stop)
    got, digest = seg.scan_segment_chunks(cut(buf, sizes), expected_first_txid=1, stop_after_txid=stop)
    assert (got.layout_version, got.first_txid, got.last_txid, got.num_records, got.valid_length) == (
        whole.layout_version, whole.first_txid, whole.last_txid, whole.num_records, whole.valid_length)
    assert [p.kind for p in got.problems] == [p.kind for p in whole.problems[:1]]
    if whole.header_ok:
        assert digest == seg.crc32c(buf[seg.HEADER_SIZE:whole.valid_length])


def test_decoder_yields_records_as_they_arrive_and_holds_at_most_a_chunk_and_a_record():
    payloads = [bytes([i % 251]) * 100 for i in range(2000)]  # 2000 records of 117 bytes, 234 KB
    buf = image(10, payloads)
    dec = seg.SegmentDecoder()
    got, held, chunk = [], 0, 4096
    for part in cut(buf, [chunk]):
        dec.feed(part)
        held = max(held, dec.buffered_bytes)
        while (rec := dec.next_record(expected_txid=10 + len(got))) is not None:
            got.append(rec)
    assert dec.finish() is None
    assert [r.txid for r in got] == list(range(10, 2010))
    assert held <= chunk + 117 and len(buf) > 50 * chunk
    assert dec.offset == len(buf) and dec.records_crc == seg.crc32c(buf[seg.HEADER_SIZE:])


def test_decoder_errors_and_ends():
    buf = image(1, [b"a", b"bb", b"ccc"])
    dec = seg.SegmentDecoder(where="seg 1")
    dec.feed(buf[:20])
    assert dec.next_record() is None and dec.layout_version == seg.LAYOUT_VERSION
    assert dec.finish().kind == "torn-tail"
    dec.feed(buf[20:])
    assert dec.next_record(expected_txid=1).txid == 1
    with pytest.raises(CorruptRecordError, match="has txid 2, expected 5"):
        dec.next_record(expected_txid=5)
    assert dec.next_record(expected_txid=2).txid == 2  # the refused record was not consumed
    bad = bytearray(buf)
    bad[-1] ^= 1
    dec = seg.SegmentDecoder(where="seg 1")
    dec.feed(bytes(bad))
    dec.next_record(), dec.next_record()
    with pytest.raises(CorruptRecordError, match="seg 1: at byte .*checksum mismatch for txid 3"):
        dec.next_record()
    dec = seg.SegmentDecoder()
    dec.feed(b"NOTMAGIC" + bytes(8))
    with pytest.raises(CorruptSegmentError):
        dec.next_record()
    dec = seg.SegmentDecoder()
    dec.feed(buf + b"\x00\x00")
    dec.feed(b"\xff\x00z")
    assert [dec.next_record() for _ in range(4)][3] is None and dec.ended
    assert dec.finish().kind == "trailing-garbage"


def _pull(chunks: list[bytes], take) -> tuple[list, str]:
    """Feed ``chunks`` one by one, pulling with ``take(dec, expected_txid)`` (a list) until it is empty."""
    dec = seg.SegmentDecoder()
    got: list = []
    try:
        for part in chunks:
            dec.feed(part)
            while recs := take(dec, 1 + len(got)):
                got.extend(recs)
    except (CorruptRecordError, CorruptSegmentError) as e:
        return got, type(e).__name__
    p = dec.finish()
    return got, p.kind if p else "clean"


@settings(max_examples=300, deadline=None, print_blob=True)
@given(payloads=st.lists(st.binary(max_size=80), min_size=0, max_size=10),
       sizes=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=5),
       damage=st.one_of(st.none(), st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=7)),
                        st.tuples(st.integers(min_value=0), st.just(-1))),
       tail=st.sampled_from([b"", b"\x00" * 9, b"\x01\x02"]), batch=st.integers(min_value=1, max_value=6))
def test_next_records_is_next_record_in_batches(payloads, sizes, damage, tail, batch):
    """The batch pull the quorum reader uses returns the records, the end and the errors of the one-by-one pull."""
    chunks = cut(damaged(image(1, payloads) + tail, damage), sizes)

    def one(dec, want):
        rec = dec.next_record(want)
        return [rec] if rec is not None else []

    assert _pull(chunks, lambda dec, want: dec.next_records(batch, want)) == _pull(chunks, one)

"""Framing: round trips, arbitrary read splits, early rejection of oversized
frames, undecodable bodies, and the request shape check (a table)."""

from __future__ import annotations

import random
import struct

import msgpack
import pytest

from qjournal.errors import FrameTooLargeError, InvalidRequestError, ProtocolError
from qjournal.transport.frames import (
    FrameDecoder,
    check_request,
    decode_frame_bytes,
    encode_frame,
    encode_request,
    encode_response,
)

MESSAGES = [
    [0, 1, "journal", {"req": {"jid": "j", "epoch": 3}, "records": b"\x00\x01" * 10}],
    [1, 1, True, None],
    [1, 2, False, {"type": "FencedError", "message": "m", "fields": {"epoch": 3}}],
    {"unicode": "é✓", "big": 2**63, "neg": -(2**63), "float": 1.5, "bin": bytes(range(256))},
    [],
]


def test_round_trip_preserves_bytes_and_str():
    for msg in MESSAGES:
        frame = encode_frame(msg)
        assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
        assert decode_frame_bytes(frame) == msg
        assert FrameDecoder().feed(frame) == [msg]
    out = decode_frame_bytes(encode_frame({"b": b"x", "s": "x"}))
    assert type(out["b"]) is bytes and type(out["s"]) is str


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_split_of_the_stream_gives_the_same_messages(seed):
    print(f"seed={seed}")
    rng = random.Random(seed)
    stream = b"".join(encode_frame(m) for m in MESSAGES * 5)
    dec = FrameDecoder()
    got = []
    pos = 0
    while pos < len(stream):
        step = rng.choice([1, 2, 3, 7, 64, 1000])
        got.extend(dec.feed(stream[pos:pos + step]))
        pos += step
    assert got == MESSAGES * 5
    assert dec.buffered_bytes == 0


def test_byte_at_a_time_then_many_frames_in_one_read():
    frame = encode_request(7, "heartbeat", {"req": {}})
    dec = FrameDecoder()
    for i in range(len(frame) - 1):
        assert dec.feed(frame[i:i + 1]) == []
    assert dec.feed(frame[-1:]) == [[0, 7, "heartbeat", {"req": {}}]]
    assert dec.feed(frame * 3 + frame[:5]) == [[0, 7, "heartbeat", {"req": {}}]] * 3
    assert dec.buffered_bytes == 5


def test_oversized_frame_is_rejected_from_its_header_alone():
    dec = FrameDecoder(max_frame_bytes=100, stream_name="conn from x")
    with pytest.raises(FrameTooLargeError) as ei:
        dec.feed(struct.pack(">I", 101))  # no body bytes sent yet
    assert "101" in str(ei.value) and "max_frame_bytes=100" in str(ei.value) and "conn from x" in str(ei.value)
    with pytest.raises(ProtocolError):  # the decoder is unusable afterwards
        dec.feed(b"")
    # exactly at the limit is fine
    body = msgpack.packb(b"x" * 95, use_bin_type=True)
    assert len(body) <= 100
    assert FrameDecoder(max_frame_bytes=len(body)).feed(struct.pack(">I", len(body)) + body) == [b"x" * 95]


def test_encode_refuses_oversized_body():
    with pytest.raises(FrameTooLargeError) as ei:
        encode_frame(b"x" * 200, max_frame_bytes=100)
    assert ei.value.fields["max_frame_bytes"] == 100


@pytest.mark.parametrize(
    "body",
    [
        b"",  # empty body
        b"\xc1",  # never-used msgpack byte
        b"\x92\x01",  # array of 2 with one element (truncated)
        b"\x01\x02",  # two objects in one frame
        b"\xa3\xff\xfe\xfd",  # str with invalid utf-8
    ],
)
def test_undecodable_body_is_a_protocol_error_naming_the_offset(body):
    dec = FrameDecoder(stream_name="s")
    good = encode_frame("ok")
    with pytest.raises(ProtocolError) as ei:
        dec.feed(good + struct.pack(">I", len(body)) + body)
    assert f"stream offset {len(good)}" in str(ei.value)
    with pytest.raises(ProtocolError):
        decode_frame_bytes(struct.pack(">I", len(body)) + body)


def test_decode_frame_bytes_checks_the_header():
    with pytest.raises(ProtocolError):
        decode_frame_bytes(b"\x00\x00")
    with pytest.raises(ProtocolError):
        decode_frame_bytes(encode_frame("abc") + b"x")


@pytest.mark.parametrize(
    "msg, expect",
    [
        ([0, 5, "journal", {"a": 1}], (5, "journal", {"a": 1})),
        ([0, 5, "journal", {}], (5, "journal", {})),
        ("hello", ProtocolError),
        ([0, 5, "journal"], ProtocolError),
        ([1, 5, True, None], ProtocolError),  # a response sent to a server
        ([0, "5", "journal", {}], ProtocolError),
        ([0, 5, 7, {}], InvalidRequestError),
        ([0, 5, "no such-name", {}], InvalidRequestError),
        ([0, 5, "journal", [1, 2]], InvalidRequestError),
        ([0, 5, "journal", {1: 2}], InvalidRequestError),
    ],
)
def test_check_request_table(msg, expect):
    if isinstance(expect, tuple):
        assert check_request(msg) == expect
    else:
        with pytest.raises(expect) as ei:
            check_request(msg)
        if expect is InvalidRequestError:
            assert ei.value.fields["request_id"] == 5


def test_encode_response_shape():
    assert decode_frame_bytes(encode_response(9, False, {"type": "X"})) == [1, 9, False, {"type": "X"}]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=64),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=10,
)


@settings(derandomize=True, max_examples=80, deadline=None)
@given(messages=st.lists(_values, min_size=1, max_size=8), cuts=st.lists(st.integers(0, 10_000), max_size=10))
def test_property_any_messages_any_split(messages, cuts):
    """Whatever the messages and however the stream is cut, the decoder returns them in order."""
    stream = b"".join(encode_frame(m) for m in messages)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    dec = FrameDecoder()
    got = []
    for a, b in zip(points, points[1:]):
        got.extend(dec.feed(stream[a:b]))
    assert got == messages
    assert dec.buffered_bytes == 0


@settings(derandomize=True, max_examples=200, deadline=None)
@given(junk=st.binary(min_size=1, max_size=200))
def test_property_junk_never_escapes_as_another_exception(junk):
    """Arbitrary bytes give messages, a wait for more bytes, or FrameTooLarge/ProtocolError: nothing else."""
    dec = FrameDecoder(max_frame_bytes=1024)
    messages, error = dec.feed_all(junk)
    assert error is None or isinstance(error, (FrameTooLargeError, ProtocolError))
    assert isinstance(messages, list)

"""Round trips and rejections of the QJournalProtocol wire messages."""

import pytest

from qjournal.errors import InvalidRequestError
from qjournal.protocol.messages import (INVALID_TXID, JournalState, Manifest, NewEpochResponse,
                                        PersistedPaxosData, PrepareRecoveryResponse, RequestInfo,
                                        SegmentState)

SAMPLES = [
    RequestInfo("j1", 3, 7, 100),
    RequestInfo("j1", 0, 0),
    SegmentState(1, 10, True),
    SegmentState(1, 10, True, 0xDEADBEEF),
    PersistedPaxosData(SegmentState(3, 9, True, 7), 2),
    PersistedPaxosData(SegmentState(1, 10, True), 4),
    PrepareRecoveryResponse(SegmentState(5, 9, False), 2, 3, 8),
    PrepareRecoveryResponse(None, None, 0, None),
    NewEpochResponse(None),
    NewEpochResponse(17),
    JournalState(5, 8480, "http://127.0.0.1:8480"),
    Manifest((SegmentState(1, 3, False), SegmentState(4, 9, True)), 8),
    Manifest(),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    assert type(msg).from_wire(msg.to_wire()) == msg


def test_paxos_bytes_round_trip():
    p = PersistedPaxosData(SegmentState(1, 10, True), 4)
    assert PersistedPaxosData.from_bytes(p.to_bytes()) == p
    with pytest.raises(InvalidRequestError, match="paxos/1"):
        PersistedPaxosData.from_bytes(b"\x00garbage", where="paxos/1")


@pytest.mark.parametrize("cls,wire,word", [
    (RequestInfo, None, "expected a map"),
    (RequestInfo, {"jid": "j", "epoch": 1}, "ipc_serial"),
    (RequestInfo, {"jid": 5, "epoch": 1, "ipc_serial": 1}, "jid"),
    (RequestInfo, {"jid": "j", "epoch": "1", "ipc_serial": 1}, "epoch"),
    (RequestInfo, {"jid": "j", "epoch": True, "ipc_serial": 1}, "epoch"),
    (RequestInfo, {"jid": "j", "epoch": -1, "ipc_serial": 1}, "negative epoch"),
    (SegmentState, [1, 2], "expected"),
    (SegmentState, [1, 2, True, -1], "not a CRC32C"),
    (SegmentState, [1, 2, True, "x"], "digest"),
    (SegmentState, [1, 2, 1], "in_progress"),
    (SegmentState, "x", "expected"),
    (Manifest, {"segments": 3}, "segments"),
    (PrepareRecoveryResponse, {"segment_state": None}, "last_writer_epoch"),
])
def test_malformed_rejected(cls, wire, word):
    with pytest.raises(InvalidRequestError, match=word):
        cls.from_wire(wire)


def test_committed_txid_defaults():
    r = RequestInfo.from_wire({"jid": "j", "epoch": 1, "ipc_serial": 2})
    assert r.committed_txid == INVALID_TXID and not r.has_committed_txid
    r = RequestInfo.from_wire({"jid": "j", "epoch": 1, "ipc_serial": 2, "committed_txid": None})
    assert r.committed_txid == INVALID_TXID


def test_segment_state_digest_on_the_wire_only_when_known():
    assert SegmentState(1, 2, True).to_wire() == [1, 2, True]
    assert SegmentState(1, 2, True, 5).to_wire() == [1, 2, True, 5]
    assert SegmentState.from_wire([1, 2, True, 5]).digest == 5
    assert SegmentState(1, 2, True, 5) == SegmentState(1, 2, True, 6)  # not part of equality

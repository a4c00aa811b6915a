"""Small builders shared by the JournalNode tests."""

from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import INVALID_TXID, OP_DATA, encode_records

NS = NamespaceInfo(12345, "cluster-a", 1)
OTHER_NS = NamespaceInfo(999, "cluster-a", 1)


def batch(first: int, n: int, size: int = 10) -> bytes:
    """n framed records with consecutive txids and deterministic bodies."""
    return encode_records([(t, OP_DATA, bytes([t % 251]) * size) for t in range(first, first + n)])


class Writer:
    """Produces RequestInfo headers with increasing serials, like one IPCLoggerChannel."""

    def __init__(self, jid: str, epoch: int, committed: int = INVALID_TXID) -> None:
        self.jid = jid
        self.epoch = epoch
        self.serial = 0
        self.committed = committed

    def req(self, committed: int | None = None) -> RequestInfo:
        if committed is not None:
            self.committed = committed
        r = RequestInfo(self.jid, self.epoch, self.serial, self.committed)
        self.serial += 1
        return r

"""Small builders shared by the JournalNode tests."""

from qjournal.journalnode.sync_installer import synced_tmp_name
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


def write_download(j, tmp_name: str, data: bytes, chunk_bytes: int = 7) -> None:
    """Write ``data`` to a journal's download tmp file in chunks, as the daemon streams a download."""
    j.begin_download(tmp_name)
    for i in range(0, len(data), chunk_bytes):
        j.append_download(tmp_name, data[i:i + chunk_bytes])


def commit_download(j, plan, data: bytes | None) -> None:
    """accept-recovery's commit after the daemon streamed ``data`` (when the plan downloads)."""
    if plan.download and data is not None:
        write_download(j, plan.tmp_name, data)
    j.accept_recovery_commit(plan)


def install_download(j, state, peer_committed_txid: int, data: bytes) -> bool:
    """The syncer's install after the daemon streamed ``data`` into the segment's tmp file."""
    write_download(j, synced_tmp_name(state), data)
    return j.sync.install_synced_segment(state, peer_committed_txid)

"""Shared helpers for the foundation tests."""

from __future__ import annotations

import asyncio
import errno
import os

from qjournal.protocol.messages import NamespaceInfo
from qjournal.journalmanager.file import DiskIO, FileJournal
from qjournal.protocol import segment as seg

NS = NamespaceInfo(namespace_id=77, cluster_id="test-cluster")


def run(coro):
    """Run one coroutine on a fresh event loop (no pytest-asyncio needed)."""
    return asyncio.run(coro)


def body(txid: int) -> bytes:
    return b"edit-%d" % txid


class FaultyDisk(DiskIO):
    """A DiskIO whose write / fdatasync / fsync fail while the matching flag is set."""

    def __init__(self) -> None:
        self.fail_write = False
        self.fail_sync = False
        self.fail_fsync = False
        self.syncs = 0

    def write_all(self, fd, data):
        if self.fail_write:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write_all(fd, data)

    def fdatasync(self, fd):
        if self.fail_sync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.syncs += 1
        super().fdatasync(fd)

    def fsync(self, fd):
        if self.fail_fsync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


async def new_journal(path, **kw) -> FileJournal:
    j = FileJournal(str(path), **kw)
    await j.format(NS)
    return j


async def write_segment(j, first: int, last: int, finalize: bool = True, batch: int = 10):
    """Write txids first..last in batches (mark + sync each), optionally finalize."""
    s = await j.start_log_segment(first)
    t = first
    while t <= last:
        for x in range(t, min(last, t + batch - 1) + 1):
            s.write(x, body(x))
        s.mark()
        await s.sync()
        t += batch
    if finalize:
        await j.finalize_log_segment(first, last)
    return s


async def read_all(stream) -> list[int]:
    out = []
    async for r in stream:
        assert r.body == body(r.txid), f"txid {r.txid} has wrong bytes"
        out.append(r.txid)
    return out


def seg_path(j, start: int, end: int | None = None) -> str:
    return os.path.join(j.current_dir, seg.segment_file_name(start, end))

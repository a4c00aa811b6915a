"""A live journal for the pipeline's tests: JournalNode processes and a writer of NameNode ops.

Why shared: the streaming source test and the standalone-cluster test both need
running JournalNodes (real processes, ``qjournal journalnode``) holding a
NameNode history that is still being written (finalized segments and an open
one), written through the real ``QuorumJournalManager``.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from qjournal.client.qjm import QuorumJournalManager
from qjournal.namenode import ops as nn_ops
from qjournal.pipeline.generate import HistoryGenerator
from qjournal.protocol.messages import NamespaceInfo
from qjournal.util.proc import qjournal_argv, start_daemon


class JournalWriter:
    """A QuorumJournalManager writing generated NameNode ops, on an event loop in a thread."""

    def __init__(self, uri: str, seed: int) -> None:
        self.gen = HistoryGenerator(seed)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.qjm = QuorumJournalManager(uri)
        self.next_txid = 1
        self.segment_start: int | None = None
        self.stream = None
        self._call(self.qjm.format(NamespaceInfo(4242, "CID-stream")))
        self._call(self.qjm.recover_unfinalized_segments())

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def write(self, n: int, batch: int = 10) -> int:
        """Write ``n`` txids (a segment is started when none is open), synced every ``batch``."""
        async def go() -> None:
            for _ in range(n):
                if self.stream is None:
                    self.segment_start = self.next_txid
                    self.stream = await self.qjm.start_log_segment(self.next_txid)
                    op = self.gen.marker(True)
                else:
                    op = self.gen.next_op()
                opcode, body = nn_ops.encode_op(op)
                self.stream.write(self.next_txid, body, opcode)
                self.next_txid += 1
                if (self.next_txid - 1) % batch == 0:
                    self.stream.mark()
                    await self.stream.sync()
            self.stream.mark()
            await self.stream.sync()
        self._call(go())
        return self.next_txid - 1

    def finalize(self) -> int:
        """End the open segment (its end marker, then finalize)."""
        async def go() -> None:
            opcode, body = nn_ops.encode_op(self.gen.marker(False))
            self.stream.write(self.next_txid, body, opcode)
            self.stream.mark()
            await self.stream.sync()
            await self.stream.close()
            await self.qjm.finalize_log_segment(self.segment_start, self.next_txid)
            self.next_txid += 1
            self.stream = None
        self._call(go())
        return self.next_txid - 1

    def close(self) -> None:
        try:
            self._call(self.qjm.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)



def start_journalnodes(base, n: int = 3) -> list:
    """``n`` JournalNode processes with data and logs under ``base`` (a path)."""
    jns = []
    try:
        for i in range(n):
            jns.append(start_daemon(f"jn{i}", qjournal_argv(
                "journalnode", "--edits-dir", str(base / f"jn{i}"), "--rpc-address", "127.0.0.1:0",
                "--http-address", "127.0.0.1:0"), log_path=str(base / f"jn{i}.log")))
    except BaseException:
        for j in jns:
            j.stop()
        raise
    return jns


def journal_uri(jns, jid: str) -> str:
    return "qjournal://" + ";".join(j.ready["rpc"] for j in jns) + f"/{jid}"


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    """Three JournalNode processes; yields their ``qjournal://`` URI."""
    base = tmp_path_factory.mktemp("stream-jns")
    jns = start_journalnodes(base)
    try:
        yield journal_uri(jns, "stream")
    finally:
        for j in jns:
            j.stop()



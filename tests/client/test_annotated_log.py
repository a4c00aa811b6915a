"""Seed 000's annotated log, line by line: the quorum client's recovery messages and the IPC trace of both ends.

In-process JournalNodes on the memory network (the real RPC layer, the real JournalNode service). With
``qjournal.ipc`` at TRACE, a new writer's start is, in order: "Starting recovery process for unclosed journal
segments", a ``get_journal_state`` call to every JournalNode and each one's answer (its promised epoch 0 on a fresh
journal), a ``new_epoch`` call with epoch 1 to each and each answer, then "Successfully started new epoch 1"; each
JournalNode's side shows the same calls received and answered. A second writer, after the first died with an
unfinalized segment, logs the segment it recovers, the prepare/accept/finalize calls of the recovery with its epoch
and the txid range, and "recovered segment". With tracing off (the default), no IPC line is written.
"""

from __future__ import annotations

import asyncio
import logging
import re

from qjournal.util.logs import TRACE

from .memcluster import NS, MemCluster
from .test_qjm_memory import write_segment


def messages(caplog, logger_prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(logger_prefix)]


def test_a_writers_start_reads_as_the_annotated_log(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="qjournal.client.qjm")
    caplog.set_level(TRACE, logger="qjournal.ipc")      # (last: caplog's handler takes the last level set)

    async def main():
        c = MemCluster(str(tmp_path), 3)
        await c.start()
        try:
            q = c.qjm()
            await q.format(NS)
            caplog.clear()
            await q.recover_unfinalized_segments()
            await q.close()
            return c.names
        finally:
            await c.close()

    names = asyncio.run(main())
    lines = [(r.name, r.getMessage()) for r in caplog.records
             if r.name.startswith("qjournal.ipc.client") or r.name == "qjournal.client.qjm"]
    text = [m for _, m in lines]
    start = next(i for i, m in enumerate(text) if "starting recovery process for unclosed journal segments" in m)
    done = next(i for i, m in enumerate(text) if "successfully started new epoch 1" in m)
    assert start < done
    between = text[start + 1:done]
    for name in names:
        call = next(i for i, m in enumerate(between) if re.search(rf"Call -> {name}: get_journal_state "
                                                                    r"jid='testjournal' \(\d+ B\)", m))
        answer = next(i for i, m in enumerate(between) if re.search(
            rf"Response <- {name}: get_journal_state .*last_promised_epoch: 0.* \(\d+\.\d+ ms\)", m))
        epoch = next(i for i, m in enumerate(between) if re.search(rf"Call -> {name}: new_epoch .*epoch=1", m))
        promised = next(i for i, m in enumerate(between) if re.search(rf"Response <- {name}: new_epoch ", m))
        assert call < answer < epoch < promised, between
    # each JournalNode's end of the same conversation
    server = messages(caplog, "qjournal.ipc.server")
    assert sum("get_journal_state" in m and "Call <-" in m for m in server) == 3
    assert sum(re.search(r"Response -> .*: new_epoch .*\(\d+ B, \d+\.\d+ ms\)", m) is not None for m in server) == 3


def test_a_recovery_reads_as_the_annotated_log(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="qjournal.client.qjm")
    caplog.set_level(TRACE, logger="qjournal.ipc")      # (last: caplog's handler takes the last level set)

    async def main():
        c = MemCluster(str(tmp_path), 3)
        await c.start()
        try:
            q = c.qjm()
            await q.format(NS)
            await q.recover_unfinalized_segments()
            await write_segment(q, 1, 5, finalize=False)   # the writer dies with segment 1 open
            await q.close()
            caplog.clear()
            q2 = c.qjm()
            await q2.recover_unfinalized_segments()
            await q2.close()
        finally:
            await c.close()

    asyncio.run(main())
    qjm = messages(caplog, "qjournal.client.qjm")
    ipc = messages(caplog, "qjournal.ipc.client")
    assert any("successfully started new epoch 2" in m for m in qjm)
    assert any("newest segment starts at txid 1; recovering it" in m for m in qjm)
    assert any("recovered segment 1-5" in m for m in qjm)
    for call in ("prepare_recovery", "accept_recovery", "finalize_log_segment"):
        sent = [m for m in ipc if f": {call} " in m and "Call ->" in m]
        assert len(sent) == 3 and all("epoch=2" in m for m in sent), (call, sent)
    assert all("txids=" not in m for m in ipc if "prepare_recovery" in m)
    assert any("finalize_log_segment" in m and "start_txid=1 end_txid=5" in m for m in ipc)


def test_a_batch_is_traced_with_its_epoch_and_txids_and_nothing_when_off(tmp_path, caplog):
    async def main(trace: bool):
        if trace:
            caplog.set_level(TRACE, logger="qjournal.ipc")
        c = MemCluster(str(tmp_path / ("on" if trace else "off")), 3)
        await c.start()
        try:
            q = c.qjm()
            await q.format(NS)
            await q.recover_unfinalized_segments()
            await write_segment(q, 1, 3, per_sync=3)
            await q.close()
        finally:
            await c.close()

    asyncio.run(main(False))
    assert not [r for r in caplog.records if r.name.startswith("qjournal.ipc")]
    asyncio.run(main(True))
    batches = [m for m in messages(caplog, "qjournal.ipc.client") if ": journal " in m and "Call ->" in m]
    assert len(batches) == 3 and all(re.search(r"epoch=1 ipc=\d+ committed=-?\d+ txids=1-3 .*records=<\d+ bytes>", m)
                                     for m in batches), batches

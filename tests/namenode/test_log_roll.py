"""``dfs.ha.log-roll.period``: the standby asks the active to roll its edit log (HDFS's EditLogTailer trigger).

Two NameNodes in one process over a ``file://`` shared edits dir (real RPC on loopback). Shows: a standby that
applied edits asks every period and the active's segment is finalized (the shared dir holds it, the standby tails
it); a request with nothing new to roll rolls nothing; neither an active nor an observer asks; the active never
rolls on a timer of its own; the checkpointer asks after handing an image to the active.
"""

from __future__ import annotations

import asyncio
import os

from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import DFSClient
from qjournal.namenode.format import format_namenode
from qjournal.namenode.ha_state import HAState
from qjournal.protocol.segment import parse_segment_file_name
from qjournal.util.waiting import async_wait_until

from .test_ha_inprocess import base_conf, start_pair


def finalized_segments(tmp) -> list[tuple[int, int]]:
    names = (parse_segment_file_name(n) for n in os.listdir(f"{tmp}/shared/current"))
    return sorted((s.start_txid, s.end_txid) for s in names if s is not None and not s.in_progress)


def test_the_standby_asks_the_active_to_roll_every_period(tmp_path):
    async def main():
        nn1, nn2, conf = await start_pair(tmp_path, **{"dfs.ha.log-roll.period": "100ms",
                                                        "dfs.ha.tail-edits.period": "50ms"})
        try:
            await nn1.ha_service.transition_to_active("user")
            first = nn1.editlog.segment_txid
            async with DFSClient(conf, user="hdfs", groups=["supergroup"]) as c:
                for i in range(5):
                    await c.mkdirs(f"/rolled/{i}")
            written = nn1.editlog.last_written_txid
            # the standby (tailing the finalized segments only: a file:// journal) sees the edits only once
            # its request made the active finalize the segment that holds them
            # (the request counts its roll when the answer arrives, which the tailer may precede: the segment is
            # finalized before the answer is sent, so both are waited for)
            await async_wait_until(lambda: nn2.last_applied_txid >= written and nn2.log_roller.rolls >= 1,
                                   "the standby tailed the edits of a segment it asked the active to roll", 30)
            assert nn1.editlog.segment_txid > first
            assert nn2.log_roller.last_error == ""
            # the segment open at the start was finalized, and so was every edit written (more rolls may fall
            # among the writes when the machine is slow: the period is 100 ms)
            segments = finalized_segments(tmp_path)
            assert any(start == first for start, _end in segments) and max(end for _s, end in segments) >= written
            # nothing new in the active's open segment: a request rolls nothing (no empty segments)
            seg = nn1.editlog.segment_txid
            assert await nn2.log_roller.trigger() is None
            assert nn1.editlog.segment_txid == seg
            # the active never asks, and has no timer of its own: only a request rolls
            assert await nn1.log_roller.trigger() is None
            # an observer does not ask either
            await nn2.ha_service.transition_to_observer("user")
            assert nn2.state == HAState.OBSERVER
            requests = nn2.log_roller.requests
            assert await nn2.log_roller.trigger() is None and nn2.log_roller.requests == requests
        finally:
            await nn2.stop()
            await nn1.stop()

    asyncio.run(main())


def test_the_checkpointer_asks_for_a_roll_after_its_upload(tmp_path):
    async def main():
        nn1, nn2, conf = await start_pair(tmp_path)   # log-roll.period 0: only the checkpointer asks
        try:
            await nn1.ha_service.transition_to_active("user")
            async with DFSClient(conf, user="hdfs", groups=["supergroup"]) as c:
                await c.mkdirs("/ckpt")
            await nn1.editlog.roll()        # the standby tails finalized segments: hand it this one
            await nn2.tailer.catch_up(nn2.shared_reader)
            seg = nn1.editlog.segment_txid
            async with DFSClient(conf, user="hdfs", groups=["supergroup"]) as c:
                await c.mkdirs("/ckpt/more")   # applied by the active only
            txid = await nn2.checkpointer.checkpoint()
            assert nn2.checkpointer.uploads == 1 and nn1.last_checkpoint_txid == txid
            assert nn1.editlog.segment_txid > seg and nn2.log_roller.rolls == 1
        finally:
            await nn2.stop()
            await nn1.stop()

    asyncio.run(main())


def test_a_namenode_without_ha_has_no_roller(tmp_path):
    async def main():
        c = base_conf(tmp_path, "solo")
        for k in ("dfs.nameservices", "dfs.ha.namenodes.ns1", "dfs.namenode.shared.edits.dir"):
            c.unset(k)
        c.set("dfs.ha.log-roll.period", "100ms")
        await format_namenode(c, cluster_id="CID-solo", namespace_id=5)
        nn = NameNode(c)
        await nn.start(serve=False)
        try:
            assert nn.state == HAState.ACTIVE and nn.log_roller is None
        finally:
            await nn.stop()

    asyncio.run(main())

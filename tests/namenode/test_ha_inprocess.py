"""Two NameNodes in one process over a file:// shared edits dir: tailing, failover, retry cache, fencing.

Real RPC over loopback (port 0); waits are conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from qjournal.config import Configuration
from qjournal.errors import FileAlreadyExistsError, ServiceFailedError, StandbyError
from qjournal.journalmanager.file import FileJournal
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import DFSClient
from qjournal.namenode.format import bootstrap_standby, format_namenode
from qjournal.namenode.ha_state import HAState
from qjournal.namenode.image import list_images

from qjournal.util.waiting import async_wait_until


def base_conf(tmp, name):
    c = Configuration()
    c.set("dfs.nameservices", "ns1")
    c.set("dfs.ha.namenodes.ns1", "nn1,nn2")
    c.set("dfs.namenode.name.dir", f"file://{tmp}/{name}")
    c.set("dfs.namenode.shared.edits.dir", f"file://{tmp}/shared")
    c.set("dfs.ha.tail-edits.period", "3600s")      # tests tail explicitly
    c.set("dfs.ha.log-roll.period", "0")
    c.set("dfs.namenode.checkpoint.check.period", "3600s")
    c.set("qjournal.namenode.superuser", "hdfs")
    c.set("dfs.client.failover.sleep.base.millis", "1")
    c.set("dfs.client.failover.max.attempts", "4")
    c.set("dfs.namenode.rpc-address.ns1.nn1", "127.0.0.1:1")  # replaced after start
    c.set("dfs.namenode.rpc-address.ns1.nn2", "127.0.0.1:1")
    return c


async def start_pair(tmp, **extra):
    """Two NameNodes (both standby) over ``<tmp>/shared``; ``extra`` keys are set on both."""
    c1, c2 = base_conf(tmp, "nn1"), base_conf(tmp, "nn2")
    for c in (c1, c2):
        for k, v in extra.items():
            c.set(k, v)
    await format_namenode(c1, cluster_id="CID-test", namespace_id=77)
    nn1 = NameNode(c1, "nn1")
    a1 = await nn1.start("127.0.0.1", 0)
    for c in (c1, c2):
        c.set("dfs.namenode.rpc-address.ns1.nn1", f"{a1[0]}:{a1[1]}")
    assert await bootstrap_standby(c2, "nn2") == 0
    nn2 = NameNode(c2, "nn2")
    a2 = await nn2.start("127.0.0.1", 0)
    for c in (c1, c2):
        c.set("dfs.namenode.rpc-address.ns1.nn2", f"{a2[0]}:{a2[1]}")
    return nn1, nn2, c1


def test_failover_with_tailing_retry_cache_and_lock_fencing(tmp_path):
    async def main():
        nn1, nn2, conf = await start_pair(tmp_path)
        client = DFSClient(conf, user="alice", groups=["staff"])
        try:
            assert nn1.state == nn2.state == HAState.STANDBY
            with pytest.raises(StandbyError):
                await nn1.client_protocol.rpc_mkdirs("/x", user="alice", groups=[])
            await nn1.ha_service.transition_to_active("user")
            # the other NameNode cannot take the shared dir's lock: it stays standby
            with pytest.raises(ServiceFailedError, match="transition to active failed"):
                await nn2.ha_service.transition_to_active("user")
            assert nn2.state == HAState.STANDBY
            su = DFSClient(conf, user="hdfs", groups=["supergroup"])
            with pytest.raises(Exception, match="Permission denied: user=alice"):
                await client.mkdirs("/user/alice")
            await su.mkdirs("/user/alice")
            await su.set_owner("/user/alice", owner="alice", group="staff")
            st = await client.create("/user/alice/f1", replication=2)
            assert st["path"] == "/user/alice/f1" and st["replication"] == 2
            await client.rename("/user/alice/f1", "/user/alice/f2")
            # a call whose answer was "lost": applied on nn1, then retried after failover
            cid = b"\x07" * 16
            first = await nn1.client_protocol.rpc_create("/user/alice/lost", user="alice", groups=["staff"],
                                         client_id=cid, call_id=5)
            await nn1.editlog.roll()
            await nn2.tailer.catch_up(nn2.shared_reader)
            assert nn2.namespace.snapshot() == nn1.namespace.snapshot()
            await nn1.ha_service.transition_to_standby("user")
            await nn2.ha_service.transition_to_active("user")
            assert nn2.state == HAState.ACTIVE and nn1.state == HAState.STANDBY
            again = await nn2.client_protocol.rpc_create("/user/alice/lost", user="alice", groups=["staff"],
                                         client_id=cid, call_id=5)
            assert again == first
            with pytest.raises(FileAlreadyExistsError):  # a new call id is a new call
                await nn2.client_protocol.rpc_create("/user/alice/lost", user="alice", groups=["staff"],
                                     client_id=cid, call_id=6)
            # the client fails over by itself (it was talking to nn1)
            await client.mkdirs("/user/alice/after")
            assert client.failovers >= 1
            names = [s["name"] for s in await client.list_status("/user/alice")]
            assert names == ["after", "f2", "lost"]
            await su.close()
            # nn1 tails nn2's edits; after nn2 rolls, nn1 has everything
            await nn2.editlog.roll()
            await nn1.tailer.catch_up(nn1.shared_reader)
            assert nn1.namespace.snapshot() == nn2.namespace.snapshot()
        finally:
            await client.close()
            await nn1.stop()
            await nn2.stop()

    asyncio.run(main())


def test_restart_replays_image_and_edits_and_checkpoint_upload(tmp_path):
    async def main():
        nn1, nn2, conf = await start_pair(tmp_path)
        for nn in (nn1, nn2):   # retention: one image, no extra edits
            nn.conf.set("dfs.namenode.num.checkpoints.retained", "1")
            nn.conf.set("dfs.namenode.num.extra.edits.retained", "0")
        client = DFSClient(conf, user="hdfs", groups=["supergroup"])
        try:
            await nn1.ha_service.transition_to_active("user")
            for i in range(20):
                await client.mkdirs(f"/d/{i}")
            await nn1.editlog.roll()
            await nn2.tailer.catch_up(nn2.shared_reader)
            txid = await nn2.checkpointer.checkpoint()   # standby saves and uploads
            assert txid == nn1.last_checkpoint_txid
            assert os.path.exists(os.path.join(nn1.name_dir, "current", f"fsimage_{txid:019d}"))
            assert [t for t, _ in list_images(nn1.name_dir)] == [txid]   # the txid-0 image was purged
            segs = await FileJournal(str(tmp_path / "shared"), use_lock=False).get_manifest(0, True)
            assert segs and all(s.end_txid > txid for s in segs), segs   # edits before it purged
            for i in range(5):
                await client.create(f"/d/{i}/f")
            want = nn1.namespace.snapshot()
        finally:
            await client.close()
            await nn1.stop()
            await nn2.stop()
        # restart nn1 alone: newest image + later edits from the shared journal
        nn1b = NameNode(nn1.conf, "nn1")
        await nn1b.start(serve=False)
        try:
            await nn1b.ha_service.transition_to_active("user")
            assert nn1b.namespace.snapshot() == want
            assert nn1b.last_checkpoint_txid == txid
        finally:
            await nn1b.stop()

    asyncio.run(main())


def test_standby_behind_purged_edits_reports_not_ready_and_refuses_to_become_active(tmp_path):
    async def main():
        nn1, nn2, conf = await start_pair(tmp_path)
        try:
            await nn1.ha_service.transition_to_active("user")
            await nn1.client_protocol.rpc_mkdirs("/a", user="hdfs", groups=[])
            second = await nn1.editlog.roll()
            await nn1.client_protocol.rpc_mkdirs("/b", user="hdfs", groups=[])
            await nn1.editlog.roll()
            await nn1.journal_set.purge_logs_older_than(second)   # the first segment is gone
            rounds = nn2.tailer.rounds
            nn2.tailer.trigger()
            await async_wait_until(lambda: nn2.tailer.rounds != rounds, "one tailing round of nn2", 20)
            st = await nn2.ha_service.rpc_get_service_status()
            assert st["ready_to_become_active"] is False and "gap" in st["not_ready_reason"]
            await nn1.ha_service.transition_to_standby("user")
            with pytest.raises(ServiceFailedError, match="gap|not available|expected txid"):
                await nn2.ha_service.transition_to_active("user")
            assert nn2.state == HAState.STANDBY
        finally:
            await nn1.stop()
            await nn2.stop()

    asyncio.run(main())

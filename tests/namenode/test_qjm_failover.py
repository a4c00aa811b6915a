"""Real processes: three JournalNodes + two NameNodes over qjournal://.

1. SIGKILL of the active while a client writes continuously; ``haadmin -transitionToActive`` on
   the standby; every create the client saw succeed is present, none it saw fail is, and the
   client carried on through its failover proxy.
2. Split brain: the active is SIGSTOPped while the standby becomes active (new epoch); after
   SIGCONT its next journal write is rejected, it exits with status 1, and the call it was
   holding is never acknowledged.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from qjournal.config import Configuration
from qjournal.errors import StandbyError, TransportError
from qjournal.namenode.dfs_client import DFSClient
from qjournal.namenode.editlog import EditLogFatalError

from qjournal.util.waiting import async_wait_until, wait_until

from .procs import Cluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def start_ha(cluster: Cluster, tmp):
    t = str(tmp)
    jns = []
    for i in range(3):
        jns.append(cluster.start(f"jn{i}", "journalnode", "--edits-dir", f"{t}/jn{i}",
                                 "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"))
    uri = "qjournal://" + ";".join(j.ready["rpc"] for j in jns) + "/ns1"
    cluster.common.update({
        "dfs.nameservices": "ns1", "dfs.ha.namenodes.ns1": "nn1,nn2",
        "dfs.namenode.shared.edits.dir": uri,
        "dfs.ha.tail-edits.period": "200ms", "dfs.ha.log-roll.period": "1s",
        "qjournal.namenode.superuser": "hdfs",
        "dfs.qjournal.write-txns.timeout.ms": "5000",
        "dfs.namenode.rpc-address.ns1.nn1": "127.0.0.1:1", "dfs.namenode.rpc-address.ns1.nn2": "127.0.0.1:1",
    })
    c1 = {"dfs.namenode.name.dir": f"file://{t}/nn1"}
    c2 = {"dfs.namenode.name.dir": f"file://{t}/nn2"}
    cluster.run("namenode", "-format", "-clusterid", "CID-qjm", extra=c1)
    nn1 = cluster.start("nn1", "namenode", "--nn-id", "nn1", "--rpc-address", "127.0.0.1:0", extra=c1)
    cluster.common["dfs.namenode.rpc-address.ns1.nn1"] = nn1.ready["rpc"]
    cluster.run("namenode", "-bootstrapStandby", "--nn-id", "nn2", extra=c2)
    nn2 = cluster.start("nn2", "namenode", "--nn-id", "nn2", "--rpc-address", "127.0.0.1:0", extra=c2)
    cluster.common["dfs.namenode.rpc-address.ns1.nn2"] = nn2.ready["rpc"]
    cluster.run("haadmin", "-transitionToActive", "nn1")
    return nn1, nn2


def client_conf(cluster: Cluster, **extra) -> Configuration:
    c = Configuration()
    for k, v in sorted({**cluster.common, **extra}.items()):
        c.set(k, v)
    return c


def test_sigkill_active_then_manual_failover_loses_no_acknowledged_op(cluster, tmp_path):
    # no rolls during the test: the standby follows the in-progress segment (committed txids only)
    cluster.common.update({"dfs.ha.log-roll.period": "1h", "dfs.ha.tail-edits.in-progress": "true"})
    nn1, nn2 = start_ha(cluster, tmp_path)
    conf = client_conf(cluster, **{"dfs.client.failover.max.attempts": "200",
                                   "dfs.client.failover.sleep.base.millis": "50",
                                   "dfs.client.failover.sleep.max.millis": "500",
                                   "qjournal.client.rpc-timeout.ms": "5000"})

    async def main():
        acked, failed = [], []
        stop = asyncio.Event()
        client = DFSClient(conf, user="hdfs", groups=["supergroup"])

        async def writer():
            i = 0
            await client.mkdirs("/w")
            while not stop.is_set():
                p = f"/w/f{i:05d}"
                try:
                    await client.create(p)
                    acked.append(p)
                except Exception as e:  # recorded, checked below
                    failed.append((p, repr(e)))
                i += 1

        task = asyncio.ensure_future(writer())
        await async_wait_until(lambda: len(acked) >= 30, "30 acknowledged creates on nn1", 60)
        # the standby tails the in-progress segment: it sees acknowledged creates without a roll
        async with DFSClient(conf, user="hdfs", addresses=[("nn2", *_addr(nn2))]) as probe:
            active_txid = 30

            async def standby_caught_up():
                return (await probe.call("get_stats"))["last_applied_txid"] >= active_txid
            await async_wait_until(standby_caught_up, "the standby to tail the in-progress edits", 60, poll_s=0.05)
            # ... from the JournalNodes' edit caches over RPC (HDFS-13150), not by re-downloading
            tailer = (await probe.call("get_stats"))["tailer"]
            assert tailer["rpc_reads"] >= 1, tailer
        nn1.kill()
        n_at_kill = len(acked)
        await asyncio.to_thread(cluster.run, "haadmin", "-transitionToActive", "nn2")
        await async_wait_until(lambda: len(acked) >= n_at_kill + 30, "30 more creates after the failover", 60)
        stop.set()
        await task
        assert client.failovers >= 1
        async with DFSClient(conf, user="hdfs", addresses=[("nn2", *_addr(nn2))]) as direct:
            present = {s["path"] for s in await direct.list_status("/w")}
        for p in acked:
            assert p in present, f"acknowledged {p} was lost"
        for p, why in failed:
            assert p not in present, f"{p} failed for the client ({why}) but is present"
        await client.close()

    asyncio.run(main())


def _addr(d):
    h, p = d.ready["rpc"].rsplit(":", 1)
    return h, int(p)


def test_split_brain_old_active_is_fenced_and_never_acknowledges(cluster, tmp_path):
    nn1, nn2 = start_ha(cluster, tmp_path)
    conf = client_conf(cluster, **{"qjournal.client.rpc-timeout.ms": "60000",
                                   "dfs.client.failover.max.attempts": "0"})

    async def main():
        only_nn1 = DFSClient(conf, user="hdfs", addresses=[("nn1", *_addr(nn1))])
        await only_nn1.mkdirs("/before")
        nn1.signal(signal.SIGSTOP)
        try:
            # a call that reaches the paused old active and waits in its socket
            pending = asyncio.ensure_future(only_nn1.create("/from-old-active"))
            await asyncio.to_thread(cluster.run, "haadmin", "-transitionToActive", "--forceactive", "nn2")
            only_nn2 = DFSClient(conf, user="hdfs", addresses=[("nn2", *_addr(nn2))])
            await only_nn2.create("/from-new-active")
        finally:
            nn1.signal(signal.SIGCONT)
        # never an acknowledgement: the fenced NameNode's sync is rejected (or it dies first)
        with pytest.raises((EditLogFatalError, TransportError, StandbyError)):
            await pending
        await asyncio.to_thread(wait_until, lambda: not nn1.alive(), "the fenced NameNode to exit")
        assert nn1.proc.returncode == 1
        assert await only_nn2.get_file_info("/from-old-active") is None
        assert await only_nn2.get_file_info("/before") is not None
        assert await only_nn2.get_file_info("/from-new-active") is not None
        await only_nn1.close()
        await only_nn2.close()

    asyncio.run(main())

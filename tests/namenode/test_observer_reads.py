"""Observer NameNodes (HDFS-12943) over real RPC: three JournalNodes, an active, observers, in one process.

What it shows: an observer refuses writes and msync; the HA transitions around the observer state;
a client that writes on the active and reads on an observer always sees its write (state ids);
monotonic reads across observers, one of them lagging; an observer that cannot catch up (its tailer
stopped: cut off from the journal) holds the read for its bounded wait and the client then reads on the
active and still sees its write; msync on first use and with ``auto-msync-period`` 0; the client resolves
``ObserverReadProxyProvider`` from the configuration.

Everything runs in one event loop (JournalNodes and NameNodes in-process, loopback TCP), so a test can
stop an observer's tailer directly. Waits are conditions with deadlines, never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from qjournal.config import Configuration
from qjournal.errors import ConfigError, ObserverRetryOnActiveError, ServiceFailedError, StandbyError
from qjournal.journalnode.node import JournalNode
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.dfs_client import OBSERVER_READ_PROXY_PROVIDER, DFSClient
from qjournal.namenode.format import bootstrap_standby, format_namenode
from qjournal.namenode.ha_state import HAState
from qjournal.transport import RpcClient
from qjournal.util.waiting import async_wait_until

#: the observers' bounded wait in these tests
WAIT_MS = 300


def _conf(tmp, uri: str, nn_ids: list[str], name: str) -> Configuration:
    c = Configuration()
    c.set("dfs.nameservices", "ns1")
    c.set("dfs.ha.namenodes.ns1", ",".join(nn_ids))
    c.set("dfs.namenode.name.dir", f"file://{tmp}/{name}")
    c.set("dfs.namenode.shared.edits.dir", uri)
    c.set("dfs.ha.tail-edits.in-progress", "true")
    c.set("dfs.ha.tail-edits.period", "20ms")
    c.set("dfs.ha.log-roll.period", "0")
    c.set("dfs.namenode.checkpoint.check.period", "3600s")
    c.set("dfs.namenode.observer.read.wait.ms", str(WAIT_MS))
    c.set("qjournal.namenode.superuser", "hdfs")
    c.set("dfs.client.failover.sleep.base.millis", "1")
    c.set("dfs.client.failover.max.attempts", "6")
    for nn in nn_ids:
        c.set(f"dfs.namenode.rpc-address.ns1.{nn}", "127.0.0.1:1")  # replaced after start
    return c


class ObserverCluster:
    """JournalNodes, ``nn1`` active, ``nn2`` standby, then the observers, all in this loop."""

    def __init__(self, tmp, observers: int) -> None:
        self.tmp = tmp
        self.nn_ids = ["nn1", "nn2"] + [f"obs{i + 1}" for i in range(observers)]
        self.jns: list[JournalNode] = []
        self.nns: dict[str, NameNode] = {}
        self.confs: dict[str, Configuration] = {}
        self.client_conf: Configuration | None = None

    async def start(self) -> None:
        for i in range(3):
            jn = JournalNode(edits_dir=str(self.tmp / f"jn{i}"), rpc_address=("127.0.0.1", 0),
                             http_address=("127.0.0.1", 0))
            await jn.start()
            self.jns.append(jn)
        uri = "qjournal://" + ";".join(j.rpc_bound for j in self.jns) + "/ns1"
        self.confs = {nn: _conf(self.tmp, uri, self.nn_ids, nn) for nn in self.nn_ids}
        self.client_conf = _conf(self.tmp, uri, self.nn_ids, "client")
        await format_namenode(self.confs["nn1"], cluster_id="CID-obs", namespace_id=91)
        for nn in self.nn_ids:
            if nn != "nn1":
                assert await bootstrap_standby(self.confs[nn], nn) == 0
            node = NameNode(self.confs[nn], nn)
            host, port = await node.start("127.0.0.1", 0)
            self.nns[nn] = node
            for c in list(self.confs.values()) + [self.client_conf]:
                c.set(f"dfs.namenode.rpc-address.ns1.{nn}", f"{host}:{port}")
            if nn == "nn1":
                await node.ha_service.transition_to_active()
        for nn in self.nn_ids[2:]:
            await self.nns[nn].ha_service.transition_to_observer()

    async def close(self) -> None:
        for node in self.nns.values():
            await node.stop()
        for jn in self.jns:
            await jn.stop()

    def client(self, **kw) -> DFSClient:
        kw.setdefault("observer_reads", True)
        return DFSClient(self.client_conf, user="hdfs", groups=["supergroup"], **kw)

    async def direct(self, nn: str) -> RpcClient:
        return await RpcClient.connect_tcp(*self.nns[nn].address)


@contextlib.asynccontextmanager
async def observer_cluster(tmp, observers: int = 1):
    c = ObserverCluster(tmp, observers)
    try:
        await c.start()
        yield c
    finally:
        await c.close()


W = dict(user="hdfs", groups=["supergroup"])


def test_observer_refuses_writes_and_msync_and_the_transitions_around_it(tmp_path):
    async def main():
        async with observer_cluster(tmp_path, observers=1) as c:
            obs = await c.direct("obs1")
            try:
                with pytest.raises(StandbyError, match="not supported in state observer"):
                    await obs.call("mkdirs", path="/x", client_id=b"\x01" * 16, call_id=1, **W)
                with pytest.raises(StandbyError, match="MSYNC"):
                    await obs.call("msync", **W)
                st = await obs.call("get_service_status")
                assert st["state"] == "observer" and not st["ready_to_become_active"]
                assert isinstance(st["last_applied_txid"], int)
                # an observer reaches active only through standby; the active never becomes an observer
                with pytest.raises(ServiceFailedError, match="make the observer standby first"):
                    await obs.call("transition_to_active", request_source="user_forced")
                act = await c.direct("nn1")
                try:
                    with pytest.raises(ServiceFailedError, match="cannot become an observer"):
                        await act.call("transition_to_observer", request_source="user_forced")
                    assert c.nns["nn1"].state == HAState.ACTIVE
                finally:
                    await act.close()
                await obs.call("transition_to_standby")
                assert c.nns["obs1"].state == HAState.STANDBY and c.nns["obs1"].tailer.running
                await obs.call("transition_to_observer")
                assert c.nns["obs1"].state == HAState.OBSERVER and c.nns["obs1"].tailer.running
            finally:
                await obs.close()

    asyncio.run(main())


def test_read_your_writes_on_the_observer(tmp_path):
    async def main():
        async with observer_cluster(tmp_path, observers=1) as c:
            async with c.client() as client:
                for i in range(25):
                    await client.mkdirs(f"/ryw/d{i}")
                    sid = client.state_id
                    st = await client.get_file_info(f"/ryw/d{i}")
                    assert st is not None and st["type"] == "d", i
                    assert client.state_id >= sid
                    names = [s["name"] for s in await client.list_status("/ryw")]
                    assert len(names) == i + 1
                    assert (await client.get_content_summary("/ryw"))["directory_count"] == i + 2
                # every read was served by the observer (it waited for the tailer when behind)
                assert client.observer_read_count == 75 and client.active_read_count == 0
                assert client.last_answered_by == "obs1" and client.observer_retry_count == 0
                assert c.nns["obs1"].applied_waiters is not None

    asyncio.run(main())


def test_monotonic_reads_across_observers_one_lagging(tmp_path):
    async def main():
        async with observer_cluster(tmp_path, observers=2) as c:
            async with c.client() as writer, c.client() as reader:
                await writer.mkdirs("/m")
                await c.nns["obs2"].tailer.stop()            # obs2 stops following the journal
                seen, sids = 0, []
                for i in range(6):
                    await writer.mkdirs(f"/m/d{i}")
                    # the reader stays with the observer that answered it; obs2 (behind) never answers
                    # it with an older listing: it holds the read, then the client moves on
                    n = len(await reader.list_status("/m"))
                    assert n >= seen
                    seen = n
                    sids.append(reader.state_id)
                assert sids == sorted(sids)
                assert c.nns["obs2"].last_applied_txid < reader.state_id
                c.nns["obs2"].tailer.start(c.nns["obs2"].shared_reader)   # it catches up and serves again
                await async_wait_until(lambda: c.nns["obs2"].last_applied_txid >= writer.state_id, "obs2 catch-up",
                                       10.0)
                # the writer's last mkdirs is another client's write: the reader sees it after an msync
                # (its state id then covers it, so whichever observer it stays with must too)
                await reader.msync()
                before = reader.observer_read_count
                for _ in range(4):
                    assert len(await reader.list_status("/m")) == 6
                assert reader.observer_read_count == before + 4 and reader.active_read_count == 0

    asyncio.run(main())


def test_observer_that_cannot_catch_up_waits_its_bound_then_the_read_goes_to_the_active(tmp_path):
    async def main():
        async with observer_cluster(tmp_path, observers=1) as c:
            async with c.client() as client:
                await client.mkdirs("/cut")
                assert (await client.get_file_info("/cut")) is not None
                await c.nns["obs1"].tailer.stop()            # cut off from the journal
                await client.mkdirs("/cut/after")
                loop = asyncio.get_running_loop()
                t0 = loop.time()
                st = await client.get_file_info("/cut/after")
                took_ms = (loop.time() - t0) * 1000
                assert st is not None                         # still sees its write, from the active
                assert client.active_read_count == 1
                assert client.observer_retry_count == 1 and client.last_answered_by == "nn1"
                assert WAIT_MS * 0.9 <= took_ms < WAIT_MS + 2000
                # the observer itself answers the typed retriable error after its bounded wait
                obs = await c.direct("obs1")
                try:
                    with pytest.raises(ObserverRetryOnActiveError) as ei:
                        await obs.call("get_file_info", path="/cut/after", state_id=client.state_id, **W)
                    assert ei.value.fields["client_state_id"] == client.state_id
                    assert ei.value.fields["waited_ms"] >= WAIT_MS * 0.9
                finally:
                    await obs.close()

    asyncio.run(main())


def test_msync_on_first_use_and_auto_msync_period(tmp_path):
    async def main():
        async with observer_cluster(tmp_path, observers=1) as c:
            async with c.client() as writer:
                await writer.mkdirs("/s/a")
                # a fresh client msyncs before its first read: it sees a write it never saw answered
                async with c.client() as fresh:
                    assert fresh.state_id == 0
                    assert (await fresh.get_file_info("/s/a")) is not None
                    assert fresh.state_id >= writer.state_id and fresh.observer_read_count == 1
                    assert await fresh.msync() >= writer.state_id
                # with auto-msync-period 0 every read msyncs first: it sees every write made by others
                c.client_conf.set("dfs.client.failover.observer.auto-msync-period.ns1", "0")
                async with c.client() as every:
                    for i in range(5):
                        await writer.mkdirs(f"/s/b{i}")
                        assert (await every.get_file_info(f"/s/b{i}")) is not None
                        assert every.state_id >= writer.state_id
                    assert every.observer_read_count == 5

    asyncio.run(main())


def test_proxy_provider_from_configuration(tmp_path):
    conf = _conf(tmp_path, "qjournal://127.0.0.1:1/ns1", ["nn1", "nn2"], "c")
    assert not DFSClient(conf).observer_reads
    conf.set("dfs.client.failover.proxy.provider.ns1", OBSERVER_READ_PROXY_PROVIDER)
    assert DFSClient(conf).observer_reads
    conf.set("dfs.client.failover.proxy.provider.ns1", "org.example.MadeUpProxyProvider")
    with pytest.raises(ConfigError, match="unsupported proxy provider"):
        DFSClient(conf)

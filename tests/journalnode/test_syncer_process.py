"""The JournalNodeSyncer between three real ``qjournal journalnode`` processes, under the real quorum
writer: (a) a node that was down for one whole segment in the middle of the log gets it back from its
peers; (d) a corrupted finalized copy is reported (log, /jmx, /metrics, status page), never
overwritten; (b) a node whose journal directory was deleted comes back with
``dfs.journalnode.enable.sync.format=true``, holds every finalized segment byte-identical to its
peers, and refuses to vote until it does.

Waits are conditions with deadlines; the syncer runs every 200 ms here."""

import asyncio
import glob
import os
import re
import shutil

import aiohttp
import pytest

from qjournal.client.qjm import QuorumJournalManager
from qjournal.errors import JournalRejoiningError
from qjournal.ha.zookeeper import free_ports
from qjournal.protocol.segment import OP_DATA
from qjournal.transport import RpcClient
from qjournal.util.proc import qjournal_argv, start_daemon
from qjournal.util.waiting import async_wait_until

from .jn_helpers import NS

pytestmark = pytest.mark.slow
JID = "syncjid"
DEADLINE_S = 60
FINALIZED = re.compile(r"^edits_\d{19}-\d{19}$")


class Cluster:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.ports = free_ports(3)
        self.uri = "qjournal://" + ";".join(f"127.0.0.1:{p}" for p in self.ports) + f"/{JID}"
        self.daemons = [None, None, None]

    def edits(self, i):
        return self.tmp / f"jn{i}"

    def start(self, i, *extra):
        self.daemons[i] = start_daemon(f"jn{i}", qjournal_argv(
            "-D", "qjournal.log.level=INFO", "-D", f"dfs.namenode.shared.edits.dir={self.uri}",
            "-D", "dfs.journalnode.sync.interval=200ms", *extra, "journalnode",
            "--edits-dir", str(self.edits(i)), "--rpc-address", f"127.0.0.1:{self.ports[i]}",
            "--http-address", "127.0.0.1:0"), log_path=str(self.tmp / f"jn{i}.log"), ready_timeout_s=60)

    def http(self, i):
        return f"http://{self.daemons[i].ready['http']}"

    def finalized(self, i):
        """{file name: bytes} of the finalized segments of node i."""
        out = {}
        for p in sorted(glob.glob(str(self.edits(i) / JID / "current" / "edits_0*-0*"))):
            if not FINALIZED.match(os.path.basename(p)):
                continue  # a copy being installed (.sync.tmp), a moved-aside file
            with open(p, "rb") as f:
                out[os.path.basename(p)] = f.read()
        return out

    def close(self):
        for d in self.daemons:
            if d is not None:
                d.kill()


async def write_segment(q, first, n, finalize=True):
    out = await q.start_log_segment(first)
    for t in range(first, first + n):
        out.write(t, b"op-%d" % t, OP_DATA)
    out.mark()
    await out.sync()
    if finalize:
        await out.close()
        await q.finalize_log_segment(first, first + n - 1)
    return out


async def jmx_bean(url):
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/jmx?qry=Hadoop:service=JournalNode,name=Journal-{JID}") as r:
            beans = (await r.json())["beans"]
    return beans[0] if beans else {}


async def fetch_text(url):
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            return await r.text()


def test_missed_segment_is_copied_and_a_corrupt_copy_is_reported(tmp_path):
    c = Cluster(tmp_path)
    try:
        for i in range(3):
            c.start(i)

        async def main():
            q = QuorumJournalManager(c.uri, ns_info=NS)
            try:
                await q.format(NS)
                await q.recover_unfinalized_segments()
                await write_segment(q, 1, 10)
                await async_wait_until(lambda: "edits_0000000000000000001-0000000000000000010" in c.finalized(2),
                                       "segment 1-10 on jn2", DEADLINE_S)
                c.daemons[2].kill()                                   # (a) jn2 misses segment 11-20
                await write_segment(q, 11, 10)
                c.start(2)
                await write_segment(q, 21, 10)
                await write_segment(q, 31, 5, finalize=False)
                await async_wait_until(lambda: len(c.finalized(2)) == 3, "jn2 copies segment 11-20 from its peers",
                                       DEADLINE_S)
                assert c.finalized(2) == c.finalized(0) == c.finalized(1)
                bean = await async_wait_until(lambda: _synced(c.http(2)), "the copy counted", DEADLINE_S)
                assert bean["SyncerSegmentsSynced"] >= 1 and bean["SyncerBytesSynced"] > 0

                # (d) a byte of jn1's finalized 1-10 rots in place
                path = str(c.edits(1) / JID / "current" / "edits_0000000000000000001-0000000000000000010")
                with open(path, "r+b") as f:
                    f.seek(40)
                    b = f.read(1)
                    f.seek(40)
                    f.write(bytes([b[0] ^ 0xFF]))
                damaged = open(path, "rb").read()
                bean = await async_wait_until(lambda: _conflicts(c.http(1)), "jn1 reports the conflict", DEADLINE_S)
                rounds = bean["SyncerRounds"]
                await async_wait_until(lambda: _rounds_past(c.http(1), rounds + 2), "two more rounds", DEADLINE_S)
                assert open(path, "rb").read() == damaged             # never overwritten
                page = await fetch_text(c.http(1) + "/")
                assert "is damaged" in page
                metrics = await fetch_text(c.http(1) + "/metrics")
                assert f'qjournal_journalnode_sync_conflicts{{jid="{JID}"}} 1.0' in metrics
                # the peers see a conflict too (their copy is valid, jn1's differs), and say so
                bean0 = await async_wait_until(lambda: _conflicts(c.http(0)), "jn0 reports the conflict", DEADLINE_S)
                assert bean0["SyncConflicts"] == 1
            finally:
                await q.close()
        asyncio.run(main())
        log1 = (tmp_path / "jn1.log").read_text()
        assert "finalized copies disagree" in log1 and "is damaged" in log1
    finally:
        c.close()


async def _synced(url):
    bean = await jmx_bean(url)
    return bean if bean.get("SyncerSegmentsSynced", 0) >= 1 else None


async def _conflicts(url):
    bean = await jmx_bean(url)
    return bean if bean.get("SyncConflicts", 0) >= 1 else None


async def _rounds_past(url, n):
    return (await jmx_bean(url)).get("SyncerRounds", 0) >= n


def test_a_wiped_node_formats_from_its_peers_and_votes_only_once_it_holds_the_log(tmp_path):
    c = Cluster(tmp_path)
    fmt = ("-D", "dfs.journalnode.enable.sync.format=true")
    try:
        for i in range(3):
            c.start(i, *fmt)

        async def main():
            q = QuorumJournalManager(c.uri, ns_info=NS)
            raw = None
            try:
                await q.format(NS)
                await q.recover_unfinalized_segments()
                for first in (1, 11, 21):
                    await write_segment(q, first, 10)
                out31 = await write_segment(q, 31, 5, finalize=False)
                assert c.daemons[2].stop() == 0
                shutil.rmtree(c.edits(2))                            # (b) the disk is replaced
                c.start(2, *fmt)
                await async_wait_until(lambda: len(c.finalized(2)) == 3, "jn2 holds every finalized segment again",
                                       DEADLINE_S)
                assert c.finalized(2) == c.finalized(0)
                raw = await RpcClient.connect_tcp("127.0.0.1", c.ports[2])
                assert (await raw.call("get_journal_state", jid=JID))["ns_info"] == NS.to_wire()
                # txids 31-35 were held by the peers when it was formatted: until segment 31 is
                # finalized and copied, it must not vote
                with pytest.raises(JournalRejoiningError, match="formatted from its peers"):
                    await raw.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=99)
                await out31.close()
                await q.finalize_log_segment(31, 35)
                await write_segment(q, 36, 5)
                await async_wait_until(lambda: len(c.finalized(2)) >= 4, "jn2 holds segment 31-35", DEADLINE_S)

                async def votes():
                    try:
                        await raw.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=99)
                        return True
                    except JournalRejoiningError:
                        return False
                await async_wait_until(votes, "jn2 votes again", DEADLINE_S)
                assert c.finalized(2) == c.finalized(0) == c.finalized(1)
            finally:
                if raw is not None:
                    await raw.close()
                await q.close()
        asyncio.run(main())
        log2 = (tmp_path / "jn2.log").read_text()
        assert "formatted from its peers" in log2 and "votes again" in log2
    finally:
        c.close()


def test_sync_off_means_off(tmp_path):
    """``dfs.journalnode.enable.sync=false`` on jn2: the missed segment stays missing (no round runs there)
    while its peers' syncers run five more rounds."""
    c = Cluster(tmp_path)
    off = ("-D", "dfs.journalnode.enable.sync=false")
    try:
        for i in range(2):
            c.start(i)
        c.start(2, *off)

        async def main():
            q = QuorumJournalManager(c.uri, ns_info=NS)
            try:
                await q.format(NS)
                await q.recover_unfinalized_segments()
                c.daemons[2].kill()
                await write_segment(q, 1, 10)
                c.start(2, *off)
                await write_segment(q, 11, 10)
                await async_wait_until(lambda: len(c.finalized(2)) == 1, "jn2 gets 11-20 from the writer", DEADLINE_S)
                rounds = (await jmx_bean(c.http(0)))["SyncerRounds"]
                await async_wait_until(lambda: _rounds_past(c.http(0), rounds + 5),
                                       "five more rounds of jn0's syncer", DEADLINE_S)
                assert list(c.finalized(2)) == ["edits_0000000000000000011-0000000000000000020"]
                assert (await jmx_bean(c.http(2))).get("SyncerRounds") is None
            finally:
                await q.close()
        asyncio.run(main())
        assert "the syncer is off" in (tmp_path / "jn2.log").read_text()
    finally:
        c.close()


def test_a_paused_node_acknowledges_the_same_segment_again_after_sigcont(tmp_path):
    """(c) A JournalNode stopped with SIGSTOP for 5 s during steady writes is marked out of sync (the
    writer's call deadline here is 1 s); after SIGCONT the writer catches it up inside the open segment
    and it acknowledges batches of that same segment again (no roll happens in this test, so without
    the catch-up it never would). The time from SIGCONT to its first acknowledgement is printed."""
    import signal

    from qjournal.config import Configuration

    c = Cluster(tmp_path)
    try:
        for i in range(3):
            c.start(i)
        conf = Configuration()
        conf.set("dfs.qjournal.write-txns.timeout.ms", "1000")

        async def main():
            q = QuorumJournalManager(c.uri, conf=conf, ns_info=NS)
            try:
                await q.format(NS)
                await q.recover_unfinalized_segments()
                out = await q.start_log_segment(1)
                lg2 = next(lg for lg in q.loggers.loggers if lg.name.endswith(f":{c.ports[2]}"))
                txid = 0

                async def write_for(seconds):
                    nonlocal txid
                    end = asyncio.get_running_loop().time() + seconds
                    while asyncio.get_running_loop().time() < end:
                        for _ in range(10):
                            txid += 1
                            out.write(txid, b"op-%d" % txid, OP_DATA)
                        out.mark()
                        await out.sync()
                await write_for(0.5)
                c.daemons[2].signal(signal.SIGSTOP)
                await write_for(5.0)
                assert lg2.out_of_sync, "the paused node was never marked out of sync"
                paused_at = txid
                c.daemons[2].signal(signal.SIGCONT)
                t0 = asyncio.get_running_loop().time()

                async def acked_again():   # writing on while waiting: each batch is a chance to catch up
                    if lg2.highest_acked_txid > paused_at:
                        return True
                    await write_for(0.01)
                    return False
                await async_wait_until(acked_again, "the resumed node to acknowledge again", 20, poll_s=0)
                took = asyncio.get_running_loop().time() - t0
                print(f"SIGCONT to the first acknowledgement of the resumed node: {took * 1000:.0f} ms "
                      f"(catch-ups {lg2.catch_ups}, segment still 1, txid {txid})")
                assert lg2.catch_ups >= 1 and not lg2.out_of_sync
                await out.close()
                await q.finalize_log_segment(1, txid)
            finally:
                await q.close()
        asyncio.run(main())
    finally:
        c.close()

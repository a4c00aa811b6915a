"""Three in-process JournalNodes (TCP + HTTP) under the real quorum client: a writer writes,
one node is left with extra txns from a dying writer, the next writer fences, recovers
(accept-recovery downloads the chosen copy over HTTP between JournalNodes), finalizes,
and every node ends with the same finalized segment. Checks the JournalNode side of the
contract end to end."""

import asyncio

from qjournal.client.qjm import QuorumJournalManager
from qjournal.journalnode.node import JournalNode
from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import OP_DATA, encode_header, encode_records
from qjournal.transport import RpcClient

from qjournal.util.waiting import async_wait_until

from .jn_helpers import NS

JID = "qjmjid"


def test_quorum_client_recovers_through_journalnode_http(tmp_path):
    async def main():
        nodes = []
        for i in range(3):
            n = JournalNode(edits_dir=str(tmp_path / f"jn{i}"), rpc_address=("127.0.0.1", 0),
                            http_address=("127.0.0.1", 0))
            await n.start()
            nodes.append(n)
        uri = "qjournal://" + ";".join(n.rpc_bound for n in nodes) + f"/{JID}"
        q1 = QuorumJournalManager(uri, ns_info=NS)
        q2 = None
        raw = None
        try:
            await q1.format(NS)
            await q1.recover_unfinalized_segments()
            out = await q1.start_log_segment(1)
            for t in range(1, 21):
                out.write(t, b"op-%d" % t, OP_DATA)
            out.mark()
            await out.sync()
            epoch1 = q1.epoch
            # sync returns at a quorum: let node 0 catch up before it gets the extra batch
            await async_wait_until(lambda: nodes[0].service.journals[JID].journal.highest_written_txid == 20,
                                   "node 0 to reach txid 20", 30)
            # the dying writer got txns 21-25 to node 0 only
            host, port = nodes[0].rpc_bound.rsplit(":", 1)
            raw = await RpcClient.connect_tcp(host, int(port))
            extra = encode_records([(t, OP_DATA, b"op-%d" % t) for t in range(21, 26)])
            await raw.call("journal", req=RequestInfo(JID, epoch1, 10_000, 20).to_wire(), segment_txid=1,
                           first_txid=21, num_txns=5, records=extra)
            await q1.close()
            q1 = None
            q2 = QuorumJournalManager(uri, ns_info=NS)
            await q2.recover_unfinalized_segments()
            assert q2.epoch == epoch1 + 1
            # Which value recovery chooses depends on which quorum answered prepare first: 1-25
            # (node 0 was in it) or 1-20 (it was not; 21-25 were never committed). Either way a
            # node whose copy differs downloads the chosen one over HTTP, and all nodes converge.
            # Recovery returns at a quorum, so wait for the third node (a condition with a deadline).
            finals = {}
            for n in nodes:
                async def finalized_end(n=n):
                    m = await n.service.run(JID, "get_edit_log_manifest", 0, True)
                    segs = [s.to_wire() for s in m.segments]
                    return len(segs) == 1 and segs[0][0] == 1 and segs[0][2] is False and segs[0][1]
                finals[n.name] = await async_wait_until(finalized_end, f"{n.name} to hold one finalized segment from 1",
                                                        30)
            (end,) = set(finals.values())
            assert end in (20, 25), finals
            expect = encode_header(1) + encode_records([(t, OP_DATA, b"op-%d" % t) for t in range(1, end + 1)])
            for n in nodes:
                rs = await n.service.run(JID, "open_segment_for_read", 1, False)
                with rs.stream as f:
                    assert f.read(rs.length) == expect, n.name
        finally:
            if raw is not None:
                await raw.close()
            for q in (q1, q2):
                if q is not None:
                    await q.close()
            for n in nodes:
                await n.stop()
    asyncio.run(asyncio.wait_for(main(), 120))

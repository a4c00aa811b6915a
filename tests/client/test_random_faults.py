"""Seeded random faults over many writer incarnations (reference §6.4 testRandomized, with a
content oracle). Prints its seed; replay with QJOURNAL_TEST_SEED=<seed>.

Each writer gets, per JournalNode, a channel that flips between up and down with p=0.1 before
every RPC (down: the RPC is dropped on the send side). Each accept_recovery arms, with p=0.1
each, a JournalNode-side failure just before or just after the paxos data is persisted
(HDFS-3955's window). A writer recovers, checks that every txid acknowledged to any earlier
writer survived with the bytes that were acknowledged, and writes two segments of four txids
(one per sync) until its first error.
"""

from __future__ import annotations

import asyncio
import os
import random

from qjournal.errors import InvariantViolation, QJournalError

from .faults import FaultPlan
from .memcluster import NS, MemCluster

WRITERS = 120


class InjectedFault(Exception):
    """Raised inside a JournalNode at an armed fault point."""


def _seed() -> int:
    env = os.environ.get("QJOURNAL_TEST_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2 ** 31)
    print(f"random faults seed: {seed} (replay with QJOURNAL_TEST_SEED={seed})")
    return seed


def test_random_faults_many_writers(tmp_path):
    seed = _seed()
    rng = random.Random(seed)
    armed: dict[str, str | None] = {}

    def hook_for(name: str):
        def hook(point: str) -> None:
            if armed.get(name) == point:
                armed[name] = None
                raise InjectedFault(f"injected failure at {point} on {name}")
        return hook

    async def main():
        c = MemCluster(str(tmp_path))
        from qjournal.journalnode.node import JournalNode
        for name in c.names:  # JournalNodes with the fault hook
            jn = JournalNode(c.conf, edits_dir=c.edits_dir(name), network=c.network, name=name,
                             http=False, threaded=False, fault_hook=hook_for(name))
            await jn.start()
            c.nodes[name] = jn
        q = c.qjm()
        await q.format(NS)
        await q.close()
        acked: dict[int, bytes] = {}
        max_written = 0
        stats = {"writers_ok": 0, "recoveries_failed": 0, "acks": 0}
        try:
            for w in range(WRITERS):
                up = {n: True for n in c.names}

                def should_fail(node, i, method, up=up):
                    if rng.random() < 0.1:
                        up[node] = not up[node]
                    if method == "accept_recovery" and up[node]:
                        r = rng.random()
                        armed[node] = ("before_persist_paxos" if r < 0.1 else
                                       "after_persist_paxos" if r < 0.2 else None)
                    return not up[node]
                plan = FaultPlan(should_fail)
                q = c.qjm(connector_factory=plan.connector_factory(c.network, src=f"w{w}"))
                try:
                    try:
                        await q.recover_unfinalized_segments()
                    except InvariantViolation:
                        raise
                    except QJournalError:
                        stats["recoveries_failed"] += 1
                        continue
                    # the oracle reads through a fault-free reader
                    reader = c.qjm(client_name=f"r{w}")
                    try:
                        segs = await reader.get_manifest(0)
                        last = segs[-1].end_txid if segs else 0
                        assert last >= max(acked, default=0), \
                            f"seed {seed} writer {w}: recovered to {last}, txid {max(acked)} was acked"
                        assert last <= max_written, f"seed {seed} writer {w}: {last} was never written"
                        if acked:
                            stream = await reader.open_input(1, max(acked))
                            got = {r.txid: r.body async for r in stream}
                            for t, b in sorted(acked.items()):
                                assert got.get(t) == b, f"seed {seed} writer {w}: txid {t} lost or changed"
                    finally:
                        await reader.close()
                    stats["writers_ok"] += 1
                    t = last + 1
                    try:
                        for _ in range(2):
                            s = await q.start_log_segment(t)
                            first = t
                            for _ in range(4):
                                b = b"w%d-t%d" % (w, t)
                                s.write(t, b)
                                s.mark()
                                max_written = max(max_written, t)
                                await s.sync()
                                acked[t] = b
                                stats["acks"] += 1
                                t += 1
                            await q.finalize_log_segment(first, t - 1)
                    except InvariantViolation:
                        raise
                    except QJournalError:
                        pass
                finally:
                    await q.close(drain_timeout_ms=0)
                    for n in c.names:
                        armed[n] = None
        finally:
            await c.close()
        return stats
    stats = asyncio.run(main())
    print(f"seed {seed}: {stats}")
    assert stats["writers_ok"] > 0 and stats["acks"] > 0, f"seed {seed}: nothing was exercised: {stats}"

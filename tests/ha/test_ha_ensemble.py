"""Failover controllers on a 3-server ZooKeeper ensemble whose leader is killed.

Shows: with the ZooKeeper leader SIGKILLed, the remaining two servers elect a new
leader; the controllers' sessions move to a surviving server (kazoo reconnects
within the session timeout), and afterwards there is still exactly one active
NameNode, never two at once, and the lock holder and the active agree. A
restarted server rejoins the ensemble.
"""

import asyncio
import shutil
import tempfile

import pytest

from qjournal.ha.elector import ElectorState
from qjournal.ha.zookeeper import ZooKeeperEnsemble

from .fake_ha import Harness
from qjournal.util.waiting import async_wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def ensemble():
    run_dir = tempfile.mkdtemp(prefix="qj-zk3-")
    zk = ZooKeeperEnsemble(run_dir, size=3)
    try:
        zk.start(ready_timeout_s=60)
        yield zk
    finally:
        zk.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def test_zookeeper_leader_killed(ensemble, zk_parent):
    async def main():
        # a 4 s session: a reconnect to another server must fit inside it
        h = Harness(ensemble.connect_string, zk_parent, 2, session_timeout_ms=4000)
        try:
            await h.start_all()
            await async_wait_until(lambda: len(h.actives()) == 1 and h.elector_actives() == h.actives(), "one active",
                                   30)
            leader = ensemble.leader_id()
            assert leader is not None
            await asyncio.to_thread(ensemble.kill, leader)
            await async_wait_until(lambda: ensemble.leader_id() not in (None, leader), "a new ZooKeeper leader", 30)
            # every controller is connected again and exactly one is active
            await async_wait_until(
                lambda: len(h.actives()) == 1 and h.elector_actives() == h.actives()
                and all(z.elector.state in (ElectorState.ACTIVE, ElectorState.STANDBY) for z in h.zkfcs.values()),
                "one active after the leader change", 30)
            active = h.actives()[0]
            data = await h.zkfcs[active].elector.read_active_data()
            assert f'"nn_id":"{active}"'.encode() in data
            await asyncio.to_thread(ensemble.restart, leader)
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    asyncio.run(main())

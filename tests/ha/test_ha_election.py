"""Election, fencing and health against a real ZooKeeper with in-process controllers and fake NameNodes.

Each test uses its own parent znode on the session's ZooKeeper; every wait is a
condition with a deadline. The shared transition log of the fake services is
replayed at the end of each test to check that two services were never active
at the same instant.
"""

import asyncio

import pytest

from qjournal.ha.elector import ElectorState
from qjournal.ha.health_monitor import HealthState
from qjournal.ha.zk_client import Conn
from qjournal.ha.zk_kazoo import expire_session

from qjournal.util.waiting import async_wait_until

from .fake_ha import Harness
from .zk_fixtures import drop_zk_connection

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

DEADLINE_S = 20.0


def run(coro):
    return asyncio.run(coro)


async def _one_active(h: Harness) -> str:
    await async_wait_until(lambda: len(h.actives()) == 1 and h.elector_actives() == h.actives(), "exactly one active",
                           DEADLINE_S)
    return h.actives()[0]


@pytest.mark.parametrize("n", [2, 3])
def test_election_with_contenders_and_takeover_after_session_expiry(zookeeper, zk_parent, n):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, n)
        try:
            await h.start_all()
            first = await _one_active(h)
            others = [nn for nn in sorted(h.services) if nn != first]
            await async_wait_until(lambda: all(h.zkfcs[o].elector.state is ElectorState.STANDBY for o in others),
                                   "the others standby", DEADLINE_S)
            # the lock and breadcrumb name the winner
            el = h.zkfcs[first].elector
            assert b'"nn_id":"%s"' % first.encode() in await el.read_active_data()
            assert await el.read_active_data() == await el.read_breadcrumb()
            # expire the active's ZooKeeper session (server side)
            await asyncio.to_thread(expire_session, zookeeper.connect_string, el.client_id())
            await async_wait_until(lambda: h.actives() and h.actives() != [first], "another node takes over",
                                   DEADLINE_S)
            second = await _one_active(h)
            assert second != first
            # the old active was fenced gracefully (made standby) by the new one
            assert h.services[first].state == "standby"
            z2 = h.zkfcs[second]
            assert any(e[1] == "fence_old_active_done" and e[2].get("target") == first
                       for e in z2.events), z2.events
            # the expired controller rejoined with a new session and is standby now
            await async_wait_until(lambda: h.zkfcs[first].elector.state is ElectorState.STANDBY,
                                   "old active rejoins as standby", DEADLINE_S)
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_unhealthy_namenode_gives_up_the_lock(zookeeper, zk_parent):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        try:
            await h.start_all()
            first = await _one_active(h)
            h.services[first].healthy = False
            await async_wait_until(lambda: h.actives() and h.actives() != [first], "the healthy node takes over",
                                   DEADLINE_S)
            second = await _one_active(h)
            assert h.zkfcs[first].elector.state is ElectorState.INIT  # out of the election
            # the unhealthy one stays out; once healthy again it rejoins as standby
            h.services[first].healthy = True
            await async_wait_until(lambda: h.zkfcs[first].elector.state is ElectorState.STANDBY,
                                   "recovered node rejoins as standby", DEADLINE_S)
            assert h.actives() == [second]
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_failed_fence_keeps_candidate_from_becoming_active(zookeeper, zk_parent, tmp_path):
    allow = tmp_path / "allow-fence"
    fencing = f"shell(test -e {allow})"

    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2, fencing=fencing)
        try:
            await h.start_all()
            first = await _one_active(h)
            second = [nn for nn in sorted(h.services) if nn != first][0]
            # the active becomes unreachable (graceful fencing cannot work) and loses its session
            h.services[first].reachable = False
            await asyncio.to_thread(expire_session, zookeeper.connect_string,
                                    h.zkfcs[first].elector.client_id())
            z2 = h.zkfcs[second]
            await async_wait_until(lambda: sum(e[1] == "fence_old_active_failed" for e in z2.events) >= 2,
                                   "candidate fails to fence twice", DEADLINE_S)
            assert h.services[second].state == "standby"      # never became active
            assert not any(e[1] == "transition_to_active_start" for e in z2.events)
            # every failed attempt released the lock (invariant 3 of the elector)
            releases = [e for e in z2.events if e[1] == "lock_released"]
            assert len(releases) >= 1
            # once fencing can succeed, the candidate takes over
            allow.write_text("")
            await async_wait_until(lambda: h.services[second].state == "active",
                                   "candidate active after a successful fence", DEADLINE_S)
            assert any(e[1] == "fence_old_active_done" and e[2].get("method") == fencing
                       for e in z2.events)
        finally:
            h.services[first].reachable = True
            await h.stop_all()
    run(main())


def test_graceful_failover_through_the_controllers(zookeeper, zk_parent):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        try:
            await h.start_all()
            first = await _one_active(h)
            second = [nn for nn in sorted(h.services) if nn != first][0]
            # a controller fails over only to a NameNode its health monitor has seen healthy
            await async_wait_until(lambda: h.zkfcs[second].health.state is HealthState.SERVICE_HEALTHY,
                                   f"the controller of {second} sees its NameNode healthy", DEADLINE_S)
            result = await h.zkfcs[second].rpc_graceful_failover()
            assert result["active"] == second and result["previous"] == first
            assert await _one_active(h) == second
            # clean hand-over: the old active ceded (standby by request), nobody was fenced
            assert not any(e[1] == "fence_old_active_start" for e in h.zkfcs[second].events)
            assert h.services[first].state == "standby"
            # and back: the node that ceded must not be kept out by its own cede period
            back = await h.zkfcs[first].rpc_graceful_failover()
            assert back["active"] == first and back["previous"] == second
            assert await _one_active(h) == first
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_transition_refused_releases_lock_and_other_wins(zookeeper, zk_parent):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        h.services["nn1"].refuse_active = True
        h.services["nn2"].refuse_active = True
        try:
            await h.start_all()
            await async_wait_until(
                lambda: all(any(e[1] == "transition_to_active_failed" for e in z.events) for z in h.zkfcs.values()),
                "both fail to become active at least once", DEADLINE_S)
            assert h.actives() == []
            h.services["nn2"].refuse_active = False
            await async_wait_until(lambda: h.actives() == ["nn2"], "nn2 active", DEADLINE_S)
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_suspended_connection_enters_neutral_mode(zookeeper, zk_parent):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        try:
            await h.start_all()
            first = await _one_active(h)
            el = h.zkfcs[first].elector
            with drop_zk_connection(zookeeper):
                await el.wait_for_state((ElectorState.NEUTRAL,), DEADLINE_S)
                assert any(e[1] == "neutral_mode" for e in h.zkfcs[first].events)
            # after the server is back: either the same session (lock still held) or expiry + re-election
            await _one_active(h)
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_namenode_leaving_active_behind_the_controllers_back(zookeeper, zk_parent):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        try:
            await h.start_all()
            first = await _one_active(h)
            z = h.zkfcs[first]
            await async_wait_until(lambda: (z.health.last_status or {}).get("state") == "active",
                                   "the health monitor saw the service active", DEADLINE_S)
            h.services[first]._set("standby", "user_forced")   # e.g. a forced manual transition
            await async_wait_until(lambda: any(e[1] == "service_state_mismatch" for e in z.events),
                                   "the controller notices the mismatch", DEADLINE_S)
            # it gave up the lock; the election settles with exactly one active again
            await _one_active(h)
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_quit_while_suspended_releases_the_lock_after_reconnect(zookeeper, zk_parent):
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        try:
            await h.start_all()
            first = await _one_active(h)
            second = [nn for nn in sorted(h.services) if nn != first][0]
            el = h.zkfcs[first].elector
            with drop_zk_connection(zookeeper):
                await el.wait_for_state((ElectorState.NEUTRAL,), DEADLINE_S)
                h.services[first].healthy = False       # the controller quits while cut off
                await async_wait_until(lambda: el.state is ElectorState.INIT, "quit", DEADLINE_S)
            # whether the session survived the pause or not, the lock must not stay with first
            await async_wait_until(lambda: h.actives() == [second], f"{second} active", DEADLINE_S)
            assert el.state is ElectorState.INIT
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())


def test_stuck_controller_quit_on_a_dying_connection_then_rejoins(zookeeper, zk_parent):
    """Regression (issue 11, "the stuck controller"): the NameNode stops answering at the moment
    the controller's ZooKeeper connection dies (a SIGSTOP of the node and its ZKFC). The
    controller's ``quit_election`` then deletes its lock on a connection kazoo has not yet
    declared lost; the ZooKeeper call fails with ``ConnectionLoss``. Before the fix that error
    escaped the health callback and ended the health monitor's task silently: the controller
    stayed ``SERVICE_NOT_RESPONDING`` for ever and never rejoined the election, even once its
    NameNode was healthy again, so the cluster could never fail back.
    """
    async def main():
        # the unreachable old active cannot be fenced gracefully: a shell fence that only
        # succeeds leaves the journal's epochs as the last guard, as in the reported runs
        h = Harness(zookeeper.connect_string, zk_parent, 2, fencing="shell(/bin/true)")
        try:
            await h.start_all()
            first = await _one_active(h)
            second = [nn for nn in sorted(h.services) if nn != first][0]
            z = h.zkfcs[first]
            el = z.elector
            with drop_zk_connection(zookeeper):
                # Not waiting for NEUTRAL: the quit must race kazoo noticing the dead connection.
                h.services[first].reachable = False
                await async_wait_until(lambda: any(e[1] == "quit_election" for e in z.events),
                                       "the controller quits the election", DEADLINE_S)
                await async_wait_until(lambda: el.conn_state is not Conn.CONNECTED,
                                       "kazoo notices the dead connection", DEADLINE_S)
            # the paused old active still believes it is active (only the journal's epochs fence it)
            await async_wait_until(lambda: h.services[second].state == "active", f"{second} active", DEADLINE_S)
            h.services[first]._set("standby", "restart")   # the NameNode restarts as standby
            h.services[first].reachable = True
            await async_wait_until(lambda: z.health.state.value == "SERVICE_HEALTHY",
                                   f"the controller of {first} sees its NameNode healthy again", DEADLINE_S)
            await async_wait_until(lambda: el.state is ElectorState.STANDBY,
                                   f"the controller of {first} is back in the election", DEADLINE_S)
            # and it can take over again: the cluster can fail back
            h.services[second].healthy = False
            await async_wait_until(lambda: h.actives() == [first], f"fail back to {first}", DEADLINE_S)
            assert not z.failure
        finally:
            await h.stop_all()
    run(main())


def test_observer_stays_out_of_the_election_and_rejoins_as_standby(zookeeper, zk_parent):
    """HDFS-12943 / HDFS-14130: the ZKFC of an observer never joins; made standby again, it does."""
    async def main():
        h = Harness(zookeeper.connect_string, zk_parent, 2)
        h.services["nn2"].state = "observer"
        try:
            await h.start_all()
            assert await _one_active(h) == "nn1"
            z2 = h.zkfcs["nn2"]
            await async_wait_until(lambda: any(e[1] == "observer_quit_election" for e in z2.events),
                                   "nn2's controller sees an observer", DEADLINE_S)
            # the active fails: the observer does not take over (it never entered the election)
            h.services["nn1"].healthy = False
            await async_wait_until(lambda: h.zkfcs["nn1"].elector.state is ElectorState.INIT,
                                   "nn1 quits the election", DEADLINE_S)
            assert not any(e[1] == "join_election" for e in z2.events), z2.events
            assert z2.elector.state is ElectorState.INIT and h.services["nn2"].state == "observer"
            # made standby again (-transitionToStandby): it rejoins and, nn1 being unhealthy, wins
            h.services["nn2"].state = "standby"
            await async_wait_until(lambda: h.actives() == ["nn2"], "nn2 becomes active", DEADLINE_S)
            names = [e[1] for e in z2.events]
            assert names.index("observer_rejoin_election") < names.index("join_election")
            h.check_never_two_actives()
        finally:
            await h.stop_all()
    run(main())

"""Table tests of the elector's pure decisions (qjournal.ha.elector_rules)."""

import pytest

from qjournal.ha.elector_rules import ConnAction, ElectorState, LockAction, connection_step, lock_step
from qjournal.ha.zk_client import Conn

S = ElectorState
ME, OLD, OTHER = 0x10, 0x0F, 0x20

CONNECTION_TABLE = [
    # conn, state, holder_session, session -> (action, read_lock)
    (Conn.SUSPENDED, S.ACTIVE, ME, ME, ConnAction.ENTER_NEUTRAL, False),
    (Conn.SUSPENDED, S.STANDBY, None, ME, ConnAction.NONE, False),
    (Conn.SUSPENDED, S.NEUTRAL, ME, ME, ConnAction.NONE, False),
    (Conn.SUSPENDED, S.INIT, None, ME, ConnAction.NONE, False),
    (Conn.LOST, S.ACTIVE, ME, ME, ConnAction.LOSE_LOCK, False),
    (Conn.LOST, S.NEUTRAL, ME, ME, ConnAction.LOSE_LOCK, False),
    (Conn.LOST, S.STANDBY, ME, ME, ConnAction.LOSE_LOCK, False),     # held a lock while failing over
    (Conn.LOST, S.STANDBY, None, ME, ConnAction.NONE, False),
    (Conn.LOST, S.INIT, None, None, ConnAction.NONE, False),
    (Conn.CONNECTED, S.ACTIVE, OLD, ME, ConnAction.LOSE_LOCK, True),  # new session: old lock gone
    (Conn.CONNECTED, S.NEUTRAL, OLD, ME, ConnAction.LOSE_LOCK, True),
    (Conn.CONNECTED, S.STANDBY, OLD, ME, ConnAction.FORGET_LOCK, True),
    (Conn.CONNECTED, S.ACTIVE, ME, ME, ConnAction.NONE, True),
    (Conn.CONNECTED, S.NEUTRAL, ME, ME, ConnAction.NONE, True),
    (Conn.CONNECTED, S.STANDBY, None, ME, ConnAction.NONE, True),
    (Conn.CONNECTED, S.INIT, None, ME, ConnAction.NONE, True),
]


@pytest.mark.parametrize("conn,state,holder,session,action,read", CONNECTION_TABLE)
def test_connection_step(conn, state, holder, session, action, read):
    assert connection_step(conn, state, holder, session) == (action, read)


LOCK_TABLE = [
    # wants, owner, session, state, held_off -> action
    (False, ME, ME, S.INIT, False, LockAction.RELEASE),
    (False, ME, ME, S.ACTIVE, True, LockAction.RELEASE),
    (False, OTHER, ME, S.INIT, False, LockAction.NONE),
    (False, None, ME, S.INIT, False, LockAction.NONE),
    (True, ME, ME, S.NEUTRAL, False, LockAction.RESTORE_ACTIVE),
    (True, ME, ME, S.ACTIVE, False, LockAction.NONE),
    (True, ME, ME, S.STANDBY, False, LockAction.BECOME_ACTIVE),
    (True, ME, ME, S.INIT, True, LockAction.BECOME_ACTIVE),          # ours already: hold-off irrelevant
    (True, OTHER, ME, S.STANDBY, False, LockAction.NONE),
    (True, OTHER, ME, S.INIT, False, LockAction.BECOME_STANDBY),
    (True, OTHER, ME, S.ACTIVE, False, LockAction.BECOME_STANDBY),   # invariant 1: never active on another's lock
    (True, OTHER, ME, S.NEUTRAL, False, LockAction.BECOME_STANDBY),
    (True, OLD, ME, S.NEUTRAL, False, LockAction.BECOME_STANDBY),    # our old session's lock is not ours
    (True, None, ME, S.INIT, False, LockAction.TRY_CREATE),
    (True, None, ME, S.STANDBY, False, LockAction.TRY_CREATE),
    (True, None, ME, S.STANDBY, True, LockAction.WAIT),
    (True, None, None, S.INIT, False, LockAction.TRY_CREATE),
]


@pytest.mark.parametrize("wants,owner,session,state,held_off,action", LOCK_TABLE)
def test_lock_step(wants, owner, session, state, held_off, action):
    assert lock_step(wants, owner, session, state, held_off) is action


def test_never_active_unless_owner_is_current_session():
    owners = [None, ME, OLD, OTHER]
    for wants in (False, True):
        for owner in owners:
            for state in S:
                for held_off in (False, True):
                    a = lock_step(wants, owner, ME, state, held_off)
                    if a in (LockAction.BECOME_ACTIVE, LockAction.RESTORE_ACTIVE):
                        assert owner == ME, (wants, owner, state, held_off, a)

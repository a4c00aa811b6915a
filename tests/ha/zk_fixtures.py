"""Reusable ZooKeeper fixtures and helpers for tests that need a real ZooKeeper.

Why a separate module: ``tests/ha`` and ``tests/cluster`` (and any other area)
import these into their ``conftest.py`` with ``from tests.ha.zk_fixtures import *``
or ``pytest_plugins``; one standalone server is shared by a whole test session
(starting Java costs ~0.5 s and CPU the other engineers' tests need). Each test
gets its own parent znode (``/qjtest-<uuid>``), so tests never see each other's
election state.

Helpers:

* :func:`expire_zk_session` forces a real server-side session expiry: a second
  client attaches to the session id/password and closes it (kazoo's old test
  harness did the same).
* :func:`drop_zk_connection` pauses the server (SIGSTOP) so every client goes
  ``SUSPENDED`` without losing its session; use it as a context manager.

Waiting on a condition: ``qjournal.util.waiting``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from typing import Iterator

import pytest

from qjournal.ha.zk_kazoo import expire_session
from qjournal.ha.zookeeper import ZooKeeperEnsemble

__all__ = ["zookeeper", "zk_parent", "expire_zk_session", "drop_zk_connection"]


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperEnsemble]:
    """One standalone ZooKeeper for the whole test session (stopped at the end, always)."""
    run_dir = tempfile.mkdtemp(prefix="qj-zk-")
    zk = ZooKeeperEnsemble(run_dir, size=1)
    try:
        zk.start(ready_timeout_s=60)
        yield zk
    finally:
        zk.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def zk_parent() -> str:
    """A fresh parent znode name for one test."""
    return f"/qjtest-{uuid.uuid4().hex[:12]}"


def expire_zk_session(quorum: str, client_id: tuple[int, bytes]) -> None:
    """Expire the session ``client_id`` on the server (blocking)."""
    expire_session(quorum, client_id)


@contextlib.contextmanager
def drop_zk_connection(zk: ZooKeeperEnsemble, server_id: int = 1) -> Iterator[None]:
    """Pause a ZooKeeper server for the duration of the block (clients go SUSPENDED)."""
    zk.pause(server_id)
    try:
        yield
    finally:
        zk.resume(server_id)

"""Fixtures of the HA tests: a session-wide real ZooKeeper (see zk_fixtures.py)."""

from .zk_fixtures import zk_parent, zookeeper  # noqa: F401  (pytest fixtures)

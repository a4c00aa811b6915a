"""Fixtures of the cluster tests."""

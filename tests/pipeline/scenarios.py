"""Hand-built edit histories shared by the fold's pure tests and the Spark checkpoint tests."""

from __future__ import annotations

from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import CallContext, Namespace


def tricky_history() -> tuple[Namespace, list[nn_ops.EditOp]]:
    """Renames through parent ids, a delete after a move-out, recursive deletes, overwrites, set ops.

    Returns:
        The Namespace after the ops (the expected image) and the ops, from an empty namespace.
    """
    ns = Namespace(permissions_enabled=False)
    ts = iter(range(1000, 2000, 10))

    def ctx():
        return CallContext("alice", ts=next(ts))

    ops: list[nn_ops.EditOp] = []
    ops += ns.mkdirs(ctx(), "/a/b")                  # 16386, 16387 (txids 1, 2)
    ops += ns.create(ctx(), "/a/b/f")                # 16388
    ops += ns.mkdirs(ctx(), "/c")                    # 16389
    ops += ns.create(ctx(), "/c/g")                  # 16390
    ops += ns.rename(ctx(), "/a/b", "/c/b")          # b moves out of /a
    ops += ns.delete(ctx(), "/a", recursive=True)    # b and f survive (txid 7)
    ops += ns.mkdirs(ctx(), "/c/b/d")
    ops += ns.create(ctx(), "/c/g", overwrite=True)  # the old /c/g is replaced (txid 9)
    ops += ns.mkdirs(ctx(), "/e")
    ops += ns.rename(ctx(), "/c/g", "/e/g2")
    ops += ns.delete(ctx(), "/c/b", recursive=True)  # b, f, d go (txid 12)
    ops += ns.set_times(ctx(), "/c", -1, 77)
    ops += ns.set_permission(ctx(), "/e/g2", 0o600)
    ops += ns.set_owner(ctx(), "/e/g2", None, "staff")
    ops += ns.set_replication(ctx(), "/e/g2", 5)
    ops += ns.mkdirs(ctx(), "/h")
    ops += ns.rename(ctx(), "/h", "/e/h")            # src and dst parents differ
    ops += ns.rename(ctx(), "/e/h", "/e/h2")         # same parent
    return ns, ops

"""qjournal.namenode: the NameNode with active/standby HA.

Why a package: the NameNode is the client of the quorum journal, and the
reason it exists. Its pieces, pure core first (imports flow from the shells to
the core, never back):

* ``ops``: the edit-op codec (shared with ``qjournal oev`` and the Spark pipeline).
* ``namespace``: the inode tree as a pure state machine (check, then apply).
* ``ha_state``: the HA state machine and the per-state call gate (pure).
* ``retry_cache``: answers of retried calls, rebuilt from the ops on the standby (pure).
* ``image``: the Parquet checkpoint image with its ``.crc``.
* ``editlog``: ``FSEditLog``, apply-and-log under one lock, group commit.
* ``tailer`` / ``checkpointer``: the standby's edit tailing and checkpoints.
* ``server``: the NameNode daemon (RPC, transitions, fencing through the journal).
* ``dfs_client``: ``DFSClient`` with failover, ``HAServiceClient``.
"""

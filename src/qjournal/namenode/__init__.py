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
* ``storage``: name dir, ``NNVERSION``, opening the journals, retention.
* ``tailer`` / ``checkpointer``: the standby's edit tailing and checkpoints.
* ``client_protocol``, ``ha_service``, ``namenode_protocol``: the RPC handlers,
  one per protocol (ClientProtocol; HAServiceProtocol with the transitions;
  image transfer, roll, stats), each seeing the daemon through a narrow interface.
* ``daemon``: the ``NameNode`` (lifecycle, tasks, journals, the services the
  transitions start and stop, the RPC server).
* ``format``: ``namenode -format | -bootstrapStandby | -initializeSharedEdits``.
* ``http``: ``/jmx``, ``/metrics``, ``/isActive`` and the status page.
* ``dfs_client``: ``DFSClient`` with failover, ``HAServiceClient``.
"""

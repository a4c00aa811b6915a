"""qjournal.ha: automatic failover (seed 004) on a real ZooKeeper.

Why a package: the failover controller is its own role beside each NameNode.
Modules, from the bottom up: ``zookeeper`` (run a real ZooKeeper),
``health_monitor`` (pure health rules + asyncio poller), ``elector``
(ActiveStandbyElector: lock and breadcrumb znodes, kazoo bridged into asyncio),
``fencing`` (graceful, shell, pidfence, sshfence), ``zkfc``
(ZKFailoverController wiring them to HAServiceProtocol), ``haadmin_failover``
(the ``haadmin -failover`` command).
"""

"""qjournal.ha: automatic failover (seed 004) on a real ZooKeeper.

Why a package: the failover controller is its own role beside each NameNode.
Modules, from the bottom up: ``zookeeper`` (run a real ZooKeeper),
``zk_client`` (the ZooKeeper client interface the controller is written against),
``zk_kazoo`` (its kazoo implementation), ``health_monitor`` (pure health rules +
asyncio poller), ``elector_rules`` and ``elector`` (ActiveStandbyElector: lock and
breadcrumb znodes), ``fencing`` (graceful, shell, pidfence, sshfence), ``zkfc``
(ZKFailoverController wiring them to HAServiceProtocol), ``failover`` (an
operator's ``haadmin -failover``). ZooKeeper and time are injected, so the
deterministic simulator runs the controller unchanged.
"""

"""qjournal.localcluster: a complete local HA cluster of real processes (launcher) and the failover demo.

Why a package: the demo, the failover benchmark and the cluster tests need the
same deployment (ZooKeeper, three JournalNodes, two NameNodes, two ZKFCs) with
one command to start, inspect, break, repair and stop it.
"""

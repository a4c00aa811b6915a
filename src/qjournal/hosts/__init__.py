"""Hosts for tests: network namespaces that each look like a machine of their own (issue 27).

Why a package of its own (not ``localcluster/``, not ``chaos/``): the deployment tests run the
cluster the way an operator does, one role per machine, and the next issue cuts the network between
those machines. Both need the same thing: N hosts with their own addresses, names, configuration,
data and logs, processes started inside them, and everything removed afterwards.

* :mod:`qjournal.hosts.netns`: the hosts and their network (namespaces, a bridge in a namespace of
  its own, ``/etc/netns/<ns>/hosts``, a UTS namespace for the host name, private directories).
* :mod:`qjournal.hosts.services`: a host runs the command lines of the systemd units shipped in
  the package (``systemctl start`` without systemd).
* :mod:`qjournal.hosts.runbook`: the shell blocks of ``docs/deploy.md``, run on the hosts.
* :mod:`qjournal.hosts.load`: a client load process on a host, writing the history the cluster
  checker judges.
"""

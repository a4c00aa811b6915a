"""Deploying qjournal on real hosts as an operator does (docs/deploy.md, issue 27).

* :mod:`qjournal.deploy.layout`: where things live on a host (the paths the units and the rendered
  configuration share).
* :mod:`qjournal.deploy.description`: the cluster description (one TOML file: hosts, their roles,
  Hadoop keys) and its checks.
* :mod:`qjournal.deploy.render`: one host's ``core-site.xml``, ``hdfs-site.xml`` (and ``zoo.cfg``)
  rendered from the description, using host names.
* :mod:`qjournal.deploy.units`: the systemd units shipped in ``systemd/``, which role needs which,
  and their parsed ``[Service]`` (what the test hosts run, so the units are the one source of the
  daemons' command lines).
"""

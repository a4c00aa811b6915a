"""One host's configuration files, rendered from the cluster description.

Why: every per-process ``-D`` override of the local launcher (a NameNode's id and directories, a
JournalNode's directory and addresses) is, on real hosts, a key in that host's own
``hdfs-site.xml``; and every key that names another host (the journal URI, the NameNode and ZKFC
addresses, the ZooKeeper quorum) must be the same on every host. Rendering all of them from one
description gives both. Pure: :func:`render_host` returns the files' contents; writing them is
:func:`write_files`'s.

What a host gets:

* ``core-site.xml``: ``fs.defaultFS = hdfs://<ns>``, ``ha.zookeeper.quorum`` (the ``zookeeper``
  hosts, by name), then the description's ``[core-site]``.
* ``hdfs-site.xml``: the nameservice, its NameNodes' RPC and HTTP addresses and their ZKFCs', the
  journal URI ``qjournal://jn1:8485;jn2:8485;.../<ns>``, automatic failover when there are ZKFCs,
  fencing by ``shell(/bin/true)`` (the journal's epochs fence a deposed writer; ``pidfence`` only
  works on one machine), the clients' proxy provider (observer reads when there are observers),
  then the description's ``[hdfs-site]``, and last this host's own keys: a JournalNode's
  directory and addresses, a NameNode's id and directories (:mod:`qjournal.deploy.layout`).
* ``zoo.cfg`` and ``zookeeper-myid`` on a ``zookeeper`` host (``qjournal zookeeper server``
  reads them).

Every key passes the configuration's own checks (an unknown key or a bad value is an error naming
the description), and the keys the hosts decide (:data:`DERIVED_KEYS`) cannot be set by hand.
"""

from __future__ import annotations

import os

from qjournal.config.conf import Configuration
from qjournal.deploy import layout
from qjournal.deploy.description import ClusterDescription
from qjournal.errors import ConfigError
from qjournal.ha.zookeeper import zoo_cfg_text
from qjournal.namenode.dfs_client import CONFIGURED_FAILOVER_PROXY_PROVIDER, OBSERVER_READ_PROXY_PROVIDER
from qjournal.util.fs import atomic_write

__all__ = ["render_host", "write_files", "DERIVED_KEYS", "journal_uri"]

#: keys the renderer sets from the hosts (a ``<ns>``/``<nn>`` part matches any name)
DERIVED_KEYS = (
    "fs.defaultFS", "ha.zookeeper.quorum", "dfs.nameservices", "dfs.ha.namenodes.<ns>",
    "dfs.namenode.rpc-address.<ns>.<nn>", "dfs.namenode.http-address.<ns>.<nn>",
    "dfs.ha.zkfc.rpc-address.<ns>.<nn>", "dfs.namenode.shared.edits.dir", "dfs.ha.namenode.id",
    "dfs.namenode.name.dir", "dfs.namenode.edits.dir", "dfs.journalnode.edits.dir",
    "dfs.journalnode.rpc-address", "dfs.journalnode.http-address",
)
#: the ``zoo.cfg`` keys a site may not set (the renderer's)
DERIVED_ZOO_KEYS = ("dataDir", "clientPort", "secureClientPort")
#: ZooKeeper settings of a deployment unless the description's ``[zoo-cfg]`` says otherwise
DEFAULT_ZOO_CFG = {"tickTime": "2000", "autopurge.snapRetainCount": "3", "autopurge.purgeInterval": "1"}


def _derived(key: str) -> bool:
    for d in DERIVED_KEYS:
        if "<" not in d:
            if key == d:
                return True
            continue
        head = d.split("<", 1)[0]
        if key.startswith(head) and key.count(".") == d.count("."):
            return True
    return False


def journal_uri(desc: ClusterDescription) -> str:
    """``qjournal://jn1:8485;jn2:8485;.../<ns>``: the JournalNodes by name, in the description's order."""
    port = desc.ports["journalnode-rpc"]
    return "qjournal://" + ";".join(f"{h.name}:{port}" for h in desc.with_role("journalnode")) + \
        f"/{desc.nameservice}"


def _conf(values: dict[str, str], where: str) -> bytes:
    conf = Configuration()
    for k, v in values.items():
        try:
            conf.set(k, v)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}", key=k) from e
    return conf.to_xml()


def render_host(desc: ClusterDescription, host_name: str) -> dict[str, bytes]:
    """The configuration files of ``host_name`` (module docstring).

    Returns:
        ``{file name: contents}`` for the host's configuration directory.

    Raises:
        ConfigError: the host is not in the description; a site table sets a derived key, an
            unknown key or a bad value (named with the description).
    """
    host = desc.host(host_name)
    src = desc.source
    for table, values in (("core-site", desc.core_site), ("hdfs-site", desc.hdfs_site)):
        for k in values:
            if _derived(k):
                raise ConfigError(f"{src}: [{table}] sets {k}, which the hosts decide (their names and roles); "
                                  "remove it", key=k, path=src)
    for k in desc.zoo_cfg:
        if k in DERIVED_ZOO_KEYS or k.startswith("server."):
            raise ConfigError(f"{src}: [zoo-cfg] sets {k}, which the hosts decide; remove it", key=k, path=src)
    ns, ports = desc.nameservice, desc.ports
    zks = desc.with_role("zookeeper")
    core: dict[str, str] = {"fs.defaultFS": f"hdfs://{ns}"}
    if zks:
        core["ha.zookeeper.quorum"] = ",".join(f"{h.name}:{ports['zookeeper-client']}" for h in zks)
    core.update(desc.core_site)

    nns = desc.with_role("namenode") + desc.with_role("observer")
    hdfs: dict[str, str] = {
        "dfs.nameservices": ns,
        f"dfs.ha.namenodes.{ns}": ",".join(h.namenode_id or "" for h in nns),
        "dfs.namenode.shared.edits.dir": journal_uri(desc),
        "dfs.ha.fencing.methods": "shell(/bin/true)",
        f"dfs.client.failover.proxy.provider.{ns}": (
            OBSERVER_READ_PROXY_PROVIDER if desc.with_role("observer") else CONFIGURED_FAILOVER_PROXY_PROVIDER),
    }
    if desc.with_role("zkfc"):
        hdfs["dfs.ha.automatic-failover.enabled"] = "true"
    for h in nns:
        hdfs[f"dfs.namenode.rpc-address.{ns}.{h.namenode_id}"] = f"{h.name}:{ports['namenode-rpc']}"
        hdfs[f"dfs.namenode.http-address.{ns}.{h.namenode_id}"] = f"{h.name}:{ports['namenode-http']}"
        if "zkfc" in h.roles:
            hdfs[f"dfs.ha.zkfc.rpc-address.{ns}.{h.namenode_id}"] = f"{h.name}:{ports['zkfc-rpc']}"
    hdfs.update(desc.hdfs_site)
    if "journalnode" in host.roles:
        hdfs["dfs.journalnode.edits.dir"] = layout.JOURNAL_DIR
        hdfs["dfs.journalnode.rpc-address"] = f"{host.name}:{ports['journalnode-rpc']}"
        hdfs["dfs.journalnode.http-address"] = f"{host.name}:{ports['journalnode-http']}"
    if host.namenode_id is not None:
        hdfs["dfs.ha.namenode.id"] = host.namenode_id
        hdfs["dfs.namenode.name.dir"] = f"file://{layout.NAME_DIR}"
        hdfs["dfs.namenode.edits.dir"] = f"file://{layout.EDITS_DIR}"

    files = {"core-site.xml": _conf(core, f"{src} (core-site.xml of {host.name})"),
             "hdfs-site.xml": _conf(hdfs, f"{src} (hdfs-site.xml of {host.name})")}
    if "zookeeper" in host.roles:
        zoo = {**DEFAULT_ZOO_CFG, **desc.zoo_cfg}
        try:
            tick = int(zoo.pop("tickTime"))
            low = zoo.pop("minSessionTimeout", None)
            high = zoo.pop("maxSessionTimeout", None)
            quorum = [(h.zookeeper_id or 0, h.name, ports["zookeeper-quorum"], ports["zookeeper-election"])
                      for h in zks] if len(zks) > 1 else []
            files["zoo.cfg"] = zoo_cfg_text(layout.ZOOKEEPER_DIR, ports["zookeeper-client"], quorum,
                                            tick_time_ms=tick, min_session_timeout_ms=int(low) if low else None,
                                            max_session_timeout_ms=int(high) if high else None,
                                            extra=zoo).encode()
        except ValueError as e:
            raise ConfigError(f"{src}: [zoo-cfg]: tickTime and the session timeouts are numbers of "
                              f"milliseconds: {e}", path=src) from e
        if quorum:
            files["zookeeper-myid"] = f"{host.zookeeper_id}\n".encode()
    return files


def write_files(files: dict[str, bytes], out_dir: str) -> list[str]:
    """Write rendered files into ``out_dir`` (each atomically). Returns the paths written.

    Raises:
        OSError: a file cannot be written.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, data in sorted(files.items()):
        path = os.path.join(out_dir, name)
        atomic_write(path, data)
        paths.append(path)
    return paths

"""The cluster description: one TOML file naming every host, its roles, and the Hadoop keys of the site.

Why one file: an operator describes the cluster once (which host runs which daemon) and every
host's ``core-site.xml``, ``hdfs-site.xml`` and ``zoo.cfg`` follow from it
(:mod:`qjournal.deploy.render`), so the JournalNode URI, the NameNode addresses and the ZooKeeper
quorum can never disagree between hosts. Hosts are named, never addressed: resolution is DNS's (or
``/etc/hosts``'s) job, and a replaced machine keeps its place under a new address.

Format (docs/deploy.md has the full example)::

    nameservice = "ns1"                       # dfs.nameservices and the journal id

    [hosts.jn1]
    roles = ["journalnode", "zookeeper"]
    zookeeper-id = 1                          # the server's myid (ensembles of more than one)

    [hosts.nn1]
    roles = ["namenode", "zkfc"]
    namenode-id = "nn1"                       # its id in dfs.ha.namenodes.<ns>

    [hosts.c1]
    roles = ["client"]

    [ports]                                   # optional, Hadoop's and ZooKeeper's defaults
    journalnode-rpc = 8485

    [core-site]                               # optional: keys for every host's core-site.xml
    [hdfs-site]                               # optional: keys for every host's hdfs-site.xml
    "dfs.ha.tail-edits.period" = "10ms"
    [zoo-cfg]                                 # optional: keys for every zoo.cfg
    tickTime = 2000

Rules (each error names the file and the host or key): roles are those of :data:`ROLES`; a host has
at most one of ``namenode`` / ``observer``; ``zkfc`` only beside ``namenode``; at least two
NameNodes (HA) with unique ids; an odd number of JournalNodes (an even one tolerates no more
failures than one fewer); an odd number of ZooKeeper servers, each with a unique ``zookeeper-id``
in 1-255 when there are several; every key of the site tables is one qjournal knows; and none of
the keys the hosts decide (:data:`qjournal.deploy.render.DERIVED_KEYS`) is set by hand.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field

from qjournal.errors import ConfigError

__all__ = ["ClusterDescription", "HostSpec", "load_description", "parse_description", "ROLES", "DEFAULT_PORTS"]

#: the roles a host can have, in the order of a first start
ROLES = ("zookeeper", "journalnode", "namenode", "observer", "zkfc", "client")
#: the ports, by name: Hadoop's and ZooKeeper's defaults
DEFAULT_PORTS = {
    "journalnode-rpc": 8485, "journalnode-http": 8480, "namenode-rpc": 8020, "namenode-http": 9870,
    "zkfc-rpc": 8019, "zookeeper-client": 2181, "zookeeper-quorum": 2888, "zookeeper-election": 3888,
}
_HOST_KEYS = {"roles", "namenode-id", "zookeeper-id"}
_TOP_KEYS = {"nameservice", "hosts", "ports", "core-site", "hdfs-site", "zoo-cfg"}
#: a host name: dot-separated DNS labels
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                       r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$")
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class HostSpec:
    """One host of the description.

    Attributes:
        name: the host name every other host resolves.
        roles: its roles, in :data:`ROLES` order.
        namenode_id: its NameNode's id (``namenode`` or ``observer`` hosts).
        zookeeper_id: its ZooKeeper server id (``zookeeper`` hosts).
    """

    name: str
    roles: tuple[str, ...]
    namenode_id: str | None = None
    zookeeper_id: int | None = None


@dataclass(frozen=True)
class ClusterDescription:
    """A checked cluster description (module docstring)."""

    source: str
    nameservice: str
    hosts: dict[str, HostSpec]
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    core_site: dict[str, str] = field(default_factory=dict)
    hdfs_site: dict[str, str] = field(default_factory=dict)
    zoo_cfg: dict[str, str] = field(default_factory=dict)

    def with_role(self, role: str) -> list[HostSpec]:
        """The hosts with ``role``, in the description's order."""
        return [h for h in self.hosts.values() if role in h.roles]

    def host(self, name: str) -> HostSpec:
        """The host ``name``.

        Raises:
            ConfigError: no such host in the description.
        """
        try:
            return self.hosts[name]
        except KeyError:
            raise ConfigError(f"{self.source}: no host {name!r} (hosts: {', '.join(self.hosts)})",
                              path=self.source) from None


def load_description(path: str) -> ClusterDescription:
    """Read and check a description file.

    Raises:
        ConfigError: unreadable, not TOML, or breaking a rule (module docstring).
    """
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the cluster description {path}: {e}", path=path) from e
    return parse_description(text, path)


def _site_table(data: dict, key: str, source: str) -> dict[str, str]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [{key}] must be a table of keys", path=source)
    out = {}
    for k, v in table.items():
        if isinstance(v, (dict, list)):
            raise ConfigError(f"{source}: [{key}] {k}: a string, number or boolean is expected", path=source)
        out[str(k)] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def parse_description(text: str, source: str = "<description>") -> ClusterDescription:
    """Parse and check a description's text (``source`` names it in errors).

    Raises:
        ConfigError: not TOML, or breaking a rule (module docstring).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}", path=source) from e
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown top-level keys {unknown}; expected {sorted(_TOP_KEYS)}", path=source)
    ns = data.get("nameservice")
    if not isinstance(ns, str) or not _ID.match(ns):
        raise ConfigError(f"{source}: nameservice must be a name of letters, digits, '-' and '_', got {ns!r}",
                          path=source)
    raw_hosts = data.get("hosts")
    if not isinstance(raw_hosts, dict) or not raw_hosts:
        raise ConfigError(f"{source}: no [hosts.NAME] tables", path=source)
    hosts: dict[str, HostSpec] = {}
    for name, spec in raw_hosts.items():
        where = f"{source}: host {name}"
        if not _HOSTNAME.match(name):
            raise ConfigError(f"{where}: not a host name (DNS labels separated by dots)", path=source)
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a table with roles = [...]", path=source)
        bad = sorted(set(spec) - _HOST_KEYS)
        if bad:
            raise ConfigError(f"{where}: unknown keys {bad}; expected {sorted(_HOST_KEYS)}", path=source)
        roles = spec.get("roles")
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            raise ConfigError(f"{where}: roles must be a non-empty list of {list(ROLES)}", path=source)
        wrong = sorted(set(roles) - set(ROLES))
        if wrong:
            raise ConfigError(f"{where}: unknown roles {wrong}; roles are {list(ROLES)}", path=source)
        if len(set(roles)) != len(roles):
            raise ConfigError(f"{where}: a role is listed twice in {roles}", path=source)
        if "namenode" in roles and "observer" in roles:
            raise ConfigError(f"{where}: one NameNode per host: namenode or observer, not both", path=source)
        if "zkfc" in roles and "namenode" not in roles:
            raise ConfigError(f"{where}: a zkfc runs beside its NameNode: add the namenode role "
                              "(observers have no zkfc)", path=source)
        nn_id = spec.get("namenode-id")
        if ("namenode" in roles or "observer" in roles) != (nn_id is not None):
            raise ConfigError(f"{where}: namenode-id is required with the namenode or observer role, and only "
                              "then", path=source)
        if nn_id is not None and (not isinstance(nn_id, str) or not _ID.match(nn_id)):
            raise ConfigError(f"{where}: namenode-id {nn_id!r}: letters, digits, '-' and '_'", path=source)
        zk_id = spec.get("zookeeper-id")
        if zk_id is not None and ("zookeeper" not in roles or not isinstance(zk_id, int)
                                  or isinstance(zk_id, bool) or not 1 <= zk_id <= 255):
            raise ConfigError(f"{where}: zookeeper-id must be a number in 1-255 on a zookeeper host, "
                              f"got {zk_id!r}", path=source)
        hosts[name] = HostSpec(name, tuple(r for r in ROLES if r in roles), nn_id, zk_id)

    ports = dict(DEFAULT_PORTS)
    raw_ports = data.get("ports", {})
    if not isinstance(raw_ports, dict):
        raise ConfigError(f"{source}: [ports] must be a table", path=source)
    for k, v in raw_ports.items():
        if k not in DEFAULT_PORTS:
            raise ConfigError(f"{source}: [ports] {k}: unknown; ports are {sorted(DEFAULT_PORTS)}", path=source)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 65535:
            raise ConfigError(f"{source}: [ports] {k} = {v!r}: a port number is expected", path=source)
        ports[k] = v
    desc = ClusterDescription(source, ns, hosts, ports, _site_table(data, "core-site", source),
                              _site_table(data, "hdfs-site", source), _site_table(data, "zoo-cfg", source))
    _check_counts(desc)
    return desc


def _check_counts(d: ClusterDescription) -> None:
    s = d.source
    nns = d.with_role("namenode")
    if len(nns) < 2:
        raise ConfigError(f"{s}: {len(nns)} host(s) with the namenode role; HA needs at least two", path=s)
    ids = [h.namenode_id for h in nns + d.with_role("observer")]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(f"{s}: namenode-id {dup} used by more than one host", path=s)
    jns = d.with_role("journalnode")
    if len(jns) % 2 == 0:
        raise ConfigError(f"{s}: {len(jns)} JournalNodes; use an odd number (an even number tolerates no more "
                          "failures than one fewer)", path=s)
    zks = d.with_role("zookeeper")
    if zks and len(zks) % 2 == 0:
        raise ConfigError(f"{s}: {len(zks)} ZooKeeper servers; use an odd number", path=s)
    if len(zks) > 1:
        zids = [h.zookeeper_id for h in zks]
        if None in zids:
            missing = [h.name for h in zks if h.zookeeper_id is None]
            raise ConfigError(f"{s}: zookeeper-id missing on {missing} (an ensemble needs one per server)", path=s)
        dup_z = sorted({i for i in zids if zids.count(i) > 1})
        if dup_z:
            raise ConfigError(f"{s}: zookeeper-id {dup_z} used by more than one host", path=s)

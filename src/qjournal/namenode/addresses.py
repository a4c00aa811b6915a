"""Where the NameNodes of a nameservice are: the HDFS HA address keys, in one light module.

Why separate: ``haadmin``, the checkpointer, the DFS client and the ZKFC all
need the addresses, and none of them should import the NameNode daemon (and
with it pyarrow) to get them. Keys: ``dfs.nameservices``,
``dfs.ha.namenodes.<ns>``, ``dfs.namenode.rpc-address.<ns>.<nn>``, and the
non-HA ``dfs.namenode.rpc-address``; and where each serves HTTP(S) (``http_address_of``).
"""

from __future__ import annotations

from typing import Any

from qjournal.errors import InvalidRequestError
from qjournal.transport.http import https_enabled


def nameservice_of(conf: Any) -> str | None:
    """The first of ``dfs.nameservices``, or None (non-HA)."""
    ns = conf.get_list("dfs.nameservices")
    return ns[0] if ns else None


def namenode_ids(conf: Any, ns: str | None = None) -> list[str]:
    """``dfs.ha.namenodes.<ns>`` in configured order (empty without a nameservice)."""
    ns = ns or nameservice_of(conf)
    if not ns:
        return []
    return conf.get_list(f"dfs.ha.namenodes.{ns}")


def rpc_address_of(conf: Any, nn_id: str | None, ns: str | None = None) -> tuple[str, int]:
    """RPC address of NameNode ``nn_id`` of nameservice ``ns`` (default: the first) (HA) or
    ``dfs.namenode.rpc-address``.

    Raises:
        InvalidRequestError: no address configured (the key is named).
    """
    ns = ns or nameservice_of(conf)
    if ns and nn_id:
        key = f"dfs.namenode.rpc-address.{ns}.{nn_id}"
    else:
        key = "dfs.namenode.rpc-address"
    addr = conf.get_address(key)
    if addr is None:
        raise InvalidRequestError(f"configuration key {key} is not set", key=key)
    return addr


def namenode_addresses(conf: Any, ns: str | None = None) -> list[tuple[str, str, int]]:
    """``(nn_id, host, port)`` of every NameNode of the nameservice, in configured order; without
    one (or with no NameNode ids), the non-HA ``dfs.namenode.rpc-address`` as ``("nn", host, port)``;
    empty when neither is configured.

    Raises:
        InvalidRequestError: a NameNode of the nameservice has no address (the key is named).
    """
    ns = ns or nameservice_of(conf)
    out = [(nn, *rpc_address_of(conf, nn, ns)) for nn in namenode_ids(conf, ns)]
    if not out:
        addr = conf.get_address("dfs.namenode.rpc-address")
        if addr is not None:
            out.append(("nn", addr[0], addr[1]))
    return out


def http_address_of(conf: Any, nn_id: str | None) -> tuple[tuple[str, int], str, bool]:
    """Where NameNode ``nn_id`` serves HTTP (or HTTPS under ``dfs.http.policy = HTTPS_ONLY``).

    Args:
        conf: the configuration.
        nn_id: this NameNode's id (None: non-HA).

    Returns:
        ``((host, port), key, explicit)``: the address, the key it came from and whether that key
        was set (file, ``-D`` or ``set``) rather than its default.

    Raises:
        ConfigError: a malformed address or policy.
    """
    base = "dfs.namenode.https-address" if https_enabled(conf) else "dfs.namenode.http-address"
    ns = nameservice_of(conf)
    key = base
    if ns and nn_id:
        per_nn = f"{base}.{ns}.{nn_id}"
        if conf.get(per_nn):
            key = per_nn
    host, port = conf.get_address(key)
    bind = conf.get("dfs.namenode.http-bind-host")
    if bind:
        host = bind
    return (host, port), key, conf.source(key) != "default"


__all__ = ["nameservice_of", "namenode_ids", "rpc_address_of", "namenode_addresses", "http_address_of"]

"""The journal URI, ``qjournal://h1:p1;h2:p2;h3:p3/<jid>``: one parser for every role that reads it.

Why here, in the pure protocol package: the writer (``client.qjm``), the readers (the pipeline's fetch)
and the JournalNodes themselves (the syncer finds its peers in ``dfs.namenode.shared.edits.dir``, as
Hadoop's JournalNodeSyncer does) all read the same URI, and must agree on its defaults.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from qjournal.errors import ConfigError

__all__ = ["DEFAULT_PORT", "parse_qjournal_uri", "segment_url"]

#: JournalNode RPC port used when a qjournal:// URI omits it (Hadoop's 8485).
DEFAULT_PORT = 8485


def _check_jid(jid: str, uri: str) -> None:
    if not jid or "/" in jid or jid.startswith(".") or len(jid) > 255:
        raise ConfigError(f"journal URI {uri!r}: bad journal id {jid!r} (must be non-empty, "
                          f"without '/', not starting with '.')", uri=uri)


def parse_qjournal_uri(uri: str) -> tuple[list[tuple[str, int]], str]:
    """Split ``qjournal://h1:p1;h2:p2;h3:p3/<jid>`` into addresses and journal id.

    Args:
        uri: the journal URI (default port 8485 when a host has none).

    Returns:
        ([(host, port), ...] in URI order, jid).

    Raises:
        ConfigError: wrong scheme, no hosts, a bad port, a duplicate node or a bad jid.
    """
    parts = urlsplit(uri)
    if parts.scheme != "qjournal":
        raise ConfigError(f"journal URI {uri!r}: scheme must be qjournal://", uri=uri)
    netloc = parts.netloc
    jid = parts.path[1:] if parts.path.startswith("/") else parts.path
    _check_jid(jid, uri)
    addrs: list[tuple[str, int]] = []
    for item in netloc.split(";"):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):  # [ipv6]:port
            host, _, rest = item[1:].partition("]")
            port_s = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port_s = item.split(":")
        else:
            host, port_s = item, ""
        try:
            port = int(port_s) if port_s else DEFAULT_PORT
        except ValueError:
            raise ConfigError(f"journal URI {uri!r}: bad port in {item!r}", uri=uri) from None
        if not host or not 0 < port < 65536:
            raise ConfigError(f"journal URI {uri!r}: bad JournalNode address {item!r}", uri=uri)
        if (host, port) in addrs:
            raise ConfigError(f"journal URI {uri!r}: JournalNode {host}:{port} listed twice", uri=uri)
        addrs.append((host, port))
    if not addrs:
        raise ConfigError(f"journal URI {uri!r}: no JournalNode addresses", uri=uri)
    return addrs, jid


def segment_url(http_url: str, jid: str, segment_txid: int, storage_info: str, in_progress_ok: bool = True) -> str:
    """The ``/getJournal`` URL of one segment on the JournalNode serving HTTP at ``http_url``
    (reference §1.3: ``jid``, ``segmentTxId``, ``storageInfo``, ``inProgressOk``)."""
    return (f"{http_url}/getJournal?jid={quote(jid, safe='')}"
            f"&segmentTxId={int(segment_txid)}&storageInfo={quote(storage_info, safe='')}"
            f"&inProgressOk={'true' if in_progress_ok else 'false'}")

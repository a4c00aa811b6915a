"""Staging fetch: copy finalized segments from running JournalNodes into a local staging area.

Why: the pipeline reads segments with Spark's ``binaryFile``, which needs
files. For a live cluster (``--journal qjournal://h1:p1;h2:p2;h3:p3/<jid>``)
each JournalNode is asked for its manifest (``get_edit_log_manifest`` over
:class:`qjournal.transport.rpc.RpcClient`) and every finalized segment is
downloaded from its HTTP endpoint (``/getJournal``) into
``<staging>/<node>/<jid>/current/edits_<s>-<e>``, the JournalNode's own layout,
so the ingest treats staged and local copies alike. Each body streams to its
tmp file in chunks of at most ``qjournal.segment-transfer.chunk.bytes``, its
CRC32C computed on the way, so memory use does not depend on segment size.

Invariants:

1. A staged file's bytes match the ``X-Qjournal-Crc32c`` header the node sent;
   a mismatch is an error for that segment and nothing is staged (the tmp file
   is deleted).
2. Staged files appear atomically (tmp, then rename), so a crashed fetch
   leaves no half file for the ingest to read.
3. A finalized segment already staged under the same name is not fetched
   again (finalized segments never change, seed 000 §2.7 I1).
4. One unreachable node does not stop the fetch from the others; every
   failure is reported with the node and segment.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass, field

from qjournal.config import Configuration
from qjournal.errors import ConfigError, QJournalError, TransportError
from qjournal.protocol.journal_uri import parse_qjournal_uri, segment_url
from qjournal.protocol.segment import crc32c, segment_file_name
from qjournal.transport.download import http_download
from qjournal.transport.rpc import RpcClient

#: default deadline of one manifest RPC or one segment download
DEFAULT_FETCH_TIMEOUT_MS = 60_000
#: the key bounding the bytes of a body held at once
CHUNK_KEY = "qjournal.segment-transfer.chunk.bytes"


@dataclass
class FetchResult:
    """What a fetch did.

    Attributes:
        jid: the journal id.
        journal_dirs: one staging directory per node (the ingest's input).
        node_names: one name per node (``host_port``).
        fetched / skipped: segment copies downloaded / already staged.
        errors: ``node: message`` for every failure.
    """

    jid: str
    journal_dirs: list[str]
    node_names: list[str]
    fetched: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


def node_dir_name(host: str, port: int) -> str:
    """A file-system and Hadoop-path safe name for a node (``host_port``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{host}_{port}")


async def _fetch_node(host: str, port: int, jid: str, node_dir: str, result: FetchResult, *,
                      timeout_ms: int, storage_info: str | None, chunk_bytes: int, progress) -> None:
    import aiohttp  # noqa: PLC0415 - a heavy optional dependency, imported where used

    node = node_dir_name(host, port)
    client = await RpcClient.connect_tcp(host, port, connect_timeout_ms=timeout_ms)
    try:
        manifest = await client.call("get_edit_log_manifest", timeout_ms=timeout_ms, jid=jid,
                                     since_txid=0, in_progress_ok=False)
        state = await client.call("get_journal_state", timeout_ms=timeout_ms, jid=jid)
    finally:
        await client.close()
    base_url = state.get("http_url") or f"http://{host}:{state['http_port']}"
    cur = os.path.join(node_dir, jid, "current")
    os.makedirs(cur, exist_ok=True)
    async with aiohttp.ClientSession() as http:
        for start, end, in_progress in sorted(manifest["segments"]):
            if in_progress:
                continue
            name = segment_file_name(start, end)
            path = os.path.join(cur, name)
            if os.path.exists(path):
                result.skipped += 1
                continue
            url = segment_url(base_url.rstrip("/"), jid, start, storage_info or "", in_progress_ok=False)
            try:
                size = await asyncio.wait_for(_stage(http, url, path, chunk_bytes, timeout_ms),
                                              timeout_ms / 1000)
            except QJournalError as e:
                result.errors.append(f"{node}: segment {name}: {e.message}")
                continue
            result.fetched += 1
            progress(f"fetch: {node} {name} ({size} bytes)")


async def _stage(http, url: str, path: str, chunk_bytes: int, timeout_ms: int) -> int:
    """Stream ``url`` into ``path`` through ``path.tmp`` (invariants 1, 2); returns its size.

    Raises:
        TransportError: the download failed or its body does not match its CRC32C header.
    """
    tmp = f"{path}.tmp"
    async with await http_download(http, url, chunk_bytes=chunk_bytes, connect_timeout_s=timeout_ms / 1000,
                                   read_timeout_s=timeout_ms / 1000) as download:
        crc = size = 0
        try:
            with open(tmp, "wb") as f:
                while (chunk := await download.next_chunk()) is not None:
                    crc = crc32c(chunk, crc)
                    size += len(chunk)
                    f.write(chunk)
            if download.crc is None or download.crc != crc:
                want = "none" if download.crc is None else f"{download.crc:08x}"
                raise TransportError(f"body CRC32C {crc:08x} does not match X-Qjournal-Crc32c {want}",
                                     url=url)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
    return size


async def fetch_async(uri: str, staging_dir: str, *, timeout_ms: int = DEFAULT_FETCH_TIMEOUT_MS,
                      storage_info: str | None = None, chunk_bytes: int | None = None,
                      progress=None) -> FetchResult:
    """Stage every finalized segment of every node of ``uri`` (module docstring).

    Args:
        uri: ``qjournal://h1:p1;h2:p2;h3:p3/<jid>``.
        staging_dir: local directory for the copies.
        timeout_ms: deadline per RPC and per download.
        storage_info: ``NSID:CLUSTERID`` sent to ``/getJournal`` (optional).
        chunk_bytes: the largest piece of a body held at once (default: the default of
            ``qjournal.segment-transfer.chunk.bytes``).
        progress: one-line progress sink.

    Returns:
        A :class:`FetchResult` (``errors`` lists per-node failures).

    Raises:
        ConfigError: a malformed URI, or a chunk size that is not positive.
    """

    say = progress or (lambda _m: None)
    if chunk_bytes is None:
        chunk_bytes = Configuration().get_bytes(CHUNK_KEY)
    if chunk_bytes <= 0:
        raise ConfigError(f"{CHUNK_KEY} must be positive, got {chunk_bytes}", key=CHUNK_KEY)
    addrs, jid = parse_qjournal_uri(uri)
    names = [node_dir_name(h, p) for h, p in addrs]
    dirs = [os.path.join(staging_dir, n) for n in names]
    result = FetchResult(jid, dirs, names)

    async def one(i: int) -> None:
        host, port = addrs[i]
        try:
            await _fetch_node(host, port, jid, dirs[i], result, timeout_ms=timeout_ms,
                              storage_info=storage_info, chunk_bytes=chunk_bytes, progress=say)
        except (QJournalError, OSError, asyncio.TimeoutError) as e:
            msg = getattr(e, "message", None) or str(e) or type(e).__name__
            result.errors.append(f"{names[i]}: {msg}")
        except Exception as e:  # aiohttp client errors: report, keep the other nodes going
            result.errors.append(f"{names[i]}: {type(e).__name__}: {e}")

    await asyncio.gather(*(one(i) for i in range(len(addrs))))
    for d in dirs:
        os.makedirs(os.path.join(d, jid, "current"), exist_ok=True)
    result.errors.sort()
    return result


def fetch(uri: str, staging_dir: str, **kw) -> FetchResult:
    """Synchronous wrapper of :func:`fetch_async` (the CLI's entry)."""
    return asyncio.run(fetch_async(uri, staging_dir, **kw))


__all__ = ["FetchResult", "DEFAULT_FETCH_TIMEOUT_MS", "node_dir_name", "fetch_async", "fetch"]

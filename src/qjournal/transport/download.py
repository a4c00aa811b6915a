"""A segment download as bounded chunks: what every ``GET /getJournal`` returns to its reader.

Why: a segment may be far larger than the memory a reader should spend on it, so no download
(the quorum reader's, accept-recovery's, the syncer's, the pipeline's executors) holds a
whole body. A :class:`SegmentDownload` is the answer's ``X-Qjournal-Crc32c`` and
``Content-Length`` headers plus an async iterator of body chunks of at most the reader's chunk
size (``qjournal.segment-transfer.chunk.bytes``); the reader checks the CRC32C incrementally
and acts on each chunk (decode records, append to a tmp file) before asking for the next.

Theory of operation:

* :func:`http_download` sends the GET, refuses a status other than 200 and a body announced
  over ``max_bytes``, and returns at once; the chunks are read from the socket as the reader
  asks for them, and a body shorter than its ``Content-Length`` fails at its end.
* :func:`memory_download` serves an in-memory body in chunks. Only the simulator (whose HTTP
  model hands over whole bodies) and tests use it; every real path streams.
* :meth:`SegmentDownload.aclose` ends a download early (a reader failing over to another
  replica); ``async with`` does it on every exit.

Invariants:

1. No chunk handed to a reader is longer than the ``chunk_bytes`` it asked for.
2. Every failure while reading the body is a :class:`~qjournal.errors.TransportError`
   naming the URL.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable

from qjournal.errors import TransportError
from qjournal.transport.tls import REFUSED_CERTIFICATE_HINT

__all__ = ["SegmentDownload", "http_download", "memory_download", "CRC_HEADER"]

#: the response header carrying the CRC32C of the whole body (hex)
CRC_HEADER = "X-Qjournal-Crc32c"


class SegmentDownload:
    """One download in progress: its headers and its body as chunks.

    Args:
        chunks: the body, chunk by chunk.
        crc: the CRC32C the server announced for the whole body (None: no header).
        length: the announced body length (None: unknown).
        on_close: called once by :meth:`aclose` (releases a connection).

    Attributes:
        crc, length: see Args.
    """

    def __init__(self, chunks: AsyncIterator[bytes], crc: int | None, *, length: int | None = None,
                 on_close: Callable[[], Any] | None = None, local_file: Any = None) -> None:
        self.crc = crc
        self.length = length
        #: a body that is the first ``length`` bytes of this open file (an OS file with a descriptor): a server
        #: may hand it to the kernel (``sendfile``) instead of reading the chunks, so the bytes never pass
        #: through the process (seed 003: the input stream as a plain byte stream, without a copy)
        self.local_file = local_file
        self._chunks = chunks
        self._on_close = on_close
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def next_chunk(self) -> bytes | None:
        """The next chunk of the body, or None at its end.

        Raises:
            TransportError: the connection failed, or the body is shorter than announced.
        """
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None

    async def aclose(self) -> None:
        """Stop the download (idempotent)."""
        if self._closed:
            return
        self._closed = True
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        if self._on_close is not None:
            self._on_close()

    async def __aenter__(self) -> "SegmentDownload":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def memory_download(body: bytes, crc: int | None, chunk_bytes: int) -> SegmentDownload:
    """A download of a body already in memory, handed out in chunks of ``chunk_bytes`` (the
    simulator's HTTP and tests; see the module docstring)."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")

    async def chunks() -> AsyncIterator[bytes]:
        view = memoryview(body)
        for i in range(0, len(body), chunk_bytes):
            yield bytes(view[i:i + chunk_bytes])
    return SegmentDownload(chunks(), crc, length=len(body))


async def http_download(session: Any, url: str, *, chunk_bytes: int, connect_timeout_s: float,
                        read_timeout_s: float, max_bytes: int | None = None,
                        what: str = "segment") -> SegmentDownload:
    """``GET url`` with an aiohttp ``session``; the body streams in chunks of at most ``chunk_bytes``.

    Args:
        session: an ``aiohttp.ClientSession``.
        url: the ``/getJournal`` URL.
        chunk_bytes: the largest chunk handed out (invariant 1).
        connect_timeout_s, read_timeout_s: connect and per-read deadlines.
        max_bytes: refuse a body announced longer, or sent without ``Content-Length`` (None: no limit).
        what: names the limit's key in the error.

    Returns:
        The download, its body not yet read.

    Raises:
        TransportError: a connection failure, a status other than 200, a missing or too large
            ``Content-Length`` under ``max_bytes``.
    """
    import aiohttp  # noqa: PLC0415 - a heavy optional dependency, imported where used

    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=read_timeout_s)
    try:
        resp = await session.get(url, timeout=timeout)
    except aiohttp.ClientError as e:
        hint = ""
        if url.startswith("https://") and isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            hint = f"; the server closed the connection before answering: {REFUSED_CERTIFICATE_HINT}"
        raise TransportError(f"fetch of {url} failed: {type(e).__name__}: {e}{hint}", url=url) from e
    except asyncio.TimeoutError as e:
        raise TransportError(f"fetch of {url} timed out", url=url) from e
    try:
        if resp.status != 200:
            text = (await resp.text())[:200].strip()
            raise TransportError(f"fetch of {url} failed with status {resp.status}: {text}",
                                 url=url, status=resp.status)
        length = resp.content_length
        if max_bytes is not None and (length is None or length > max_bytes):
            raise TransportError(f"fetch of {url}: Content-Length {length} missing or over the limit of "
                                 f"{max_bytes} bytes ({what})", url=url)
        raw = resp.headers.get(CRC_HEADER)
        crc = int(raw, 16) if raw else None
    except (aiohttp.ClientError, ValueError) as e:
        resp.close()
        raise TransportError(f"fetch of {url} failed: {type(e).__name__}: {e}", url=url) from e
    except BaseException:
        resp.close()
        raise

    async def chunks() -> AsyncIterator[bytes]:
        got = 0
        try:
            async for part in resp.content.iter_chunked(chunk_bytes):
                got += len(part)
                yield part
        except aiohttp.ClientError as e:
            raise TransportError(f"fetch of {url} failed after {got} bytes: {type(e).__name__}: {e}",
                                 url=url) from e
        except asyncio.TimeoutError as e:
            raise TransportError(f"fetch of {url} timed out after {got} bytes", url=url) from e
        if length is not None and got != length:
            raise TransportError(f"fetch of {url}: got {got} of {length} bytes", url=url)
    return SegmentDownload(chunks(), crc, length=length, on_close=resp.close)

"""Wire framing of qjournal RPC: length-prefixed msgpack, sans I/O.

Why this module exists: the TCP transport, the TLS transport and the in-memory
network must cut a byte stream into messages in exactly the same way, so that a
malformed or oversized frame is treated the same in tests, in the simulator
and in production. This module never touches a socket, a clock or a loop: it
turns messages into bytes (:func:`encode_frame`) and bytes into messages
(:class:`FrameDecoder`), in the style of h11.

Theory of operation
-------------------
A frame is ``u32 big-endian body length | msgpack body``. Bodies are packed
with ``use_bin_type=True`` (``bytes`` travel as msgpack *bin*, ``str`` as
*str*; one reused packer per thread, :mod:`qjournal.util.packer`) and
unpacked with ``raw=False``. Messages are msgpack arrays::

    request   [0, request_id, method, kwargs]        kwargs: map str -> value
    response  [1, request_id, True, result]
              [1, request_id, False, {"type", "message", "fields"}]

The decoder keeps the unconsumed tail of the stream between calls to
:meth:`FrameDecoder.feed`; complete frames are decoded straight from the
received buffer through one memoryview per read (a read holding exactly one
small frame takes a shorter path). :meth:`FrameDecoder.feed_all` returns the
messages decoded before a bad frame together with its error, so a server can
still answer the requests that preceded garbage on a connection.

Invariants
----------
1. A frame whose declared body length exceeds ``max_frame_bytes`` is rejected
   with :class:`FrameTooLargeError` as soon as its 4-byte header is seen, before
   any of its body is buffered (a limit on memory per connection).
2. A complete frame whose body is not exactly one msgpack object raises
   :class:`ProtocolError`; the decoder is then unusable (the caller closes the
   connection, since the stream position can no longer be trusted).
3. Bytes after the last complete frame are kept, in order, for the next feed:
   frame boundaries never depend on how the stream was split into reads.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from qjournal.errors import FrameTooLargeError, InvalidRequestError, ProtocolError
from qjournal.util.packer import packb as _packb

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FRAME_HEADER_BYTES",
    "FrameDecoder",
    "KIND_REQUEST",
    "KIND_RESPONSE",
    "decode_frame_bytes",
    "encode_frame",
    "encode_request",
    "encode_response",
    "check_request",
]

#: Hadoop's ``ipc.maximum.data.length`` default: 64 MiB.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
FRAME_HEADER_BYTES = 4
KIND_REQUEST = 0
KIND_RESPONSE = 1

_HEADER = struct.Struct(">I")
_unpack_header = _HEADER.unpack_from
_pack_header = _HEADER.pack
_unpackb = msgpack.unpackb


def encode_frame(obj: Any, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode one message as a frame.

    Args:
        obj: a msgpack-able value (None, bool, int, float, str, bytes, list,
            tuple, dict).
        max_frame_bytes: refuse bodies longer than this.

    Returns:
        ``u32 length | msgpack body``.

    Raises:
        FrameTooLargeError: the body exceeds ``max_frame_bytes``.
        TypeError: ``obj`` holds a value msgpack cannot encode.
    """
    body = _packb(obj)
    if len(body) > max_frame_bytes:
        raise FrameTooLargeError(
            f"frame of {len(body)} bytes exceeds max_frame_bytes={max_frame_bytes} "
            f"(config key ipc.maximum.data.length)",
            frame_bytes=len(body),
            max_frame_bytes=max_frame_bytes,
        )
    return _pack_header(len(body)) + body


def encode_request(request_id: int, method: str, kwargs: dict, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode ``[0, request_id, method, kwargs]`` (see :func:`encode_frame`)."""
    return encode_frame([KIND_REQUEST, request_id, method, kwargs], max_frame_bytes)


def encode_response(request_id: int, ok: bool, payload: Any, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode ``[1, request_id, ok, payload]`` (see :func:`encode_frame`)."""
    return encode_frame([KIND_RESPONSE, request_id, ok, payload], max_frame_bytes)


def decode_frame_bytes(frame: bytes) -> Any:
    """Decode one whole frame (header included), e.g. inside a fault hook.

    Args:
        frame: exactly one frame as produced by :func:`encode_frame`.

    Returns:
        The decoded message.

    Raises:
        ProtocolError: ``frame`` is not exactly one well-formed frame.
    """
    if len(frame) < FRAME_HEADER_BYTES:
        raise ProtocolError(f"frame of {len(frame)} bytes is shorter than its 4-byte header")
    (length,) = _unpack_header(frame, 0)
    if length != len(frame) - FRAME_HEADER_BYTES:
        raise ProtocolError(
            f"frame header declares {length} body bytes but {len(frame) - FRAME_HEADER_BYTES} follow"
        )
    try:
        return _unpackb(memoryview(frame)[FRAME_HEADER_BYTES:], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable frame body ({type(exc).__name__}: {exc})") from None


class FrameDecoder:
    """Incremental frame decoder for one byte stream (one direction of a connection).

    Args:
        max_frame_bytes: largest acceptable body length (invariant 1).
        stream_name: used in error messages (e.g. the peer address).
    """

    __slots__ = ("max_frame_bytes", "stream_name", "_buf", "_offset", "_broken")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, stream_name: str = "stream") -> None:
        if max_frame_bytes <= 0:
            raise ValueError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self.stream_name = stream_name
        self._buf = bytearray()
        self._offset = 0  # stream offset of the start of self._buf, for messages
        self._broken = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Any]:
        """Add received bytes; return the messages of every frame now complete.

        Args:
            data: the next bytes of the stream (any split is fine, invariant 3).

        Returns:
            Decoded messages in stream order (possibly empty).

        Raises:
            FrameTooLargeError: a frame header declares more than
                ``max_frame_bytes`` (invariant 1).
            ProtocolError: a complete frame is not one msgpack object
                (invariant 2), or the decoder already failed. Messages decoded
                from earlier frames of the same ``data`` are lost; use
                :meth:`feed_all` to keep them.
        """
        messages, error = self.feed_all(data)
        if error is not None:
            raise error
        return messages

    def feed_all(self, data: bytes) -> tuple[list[Any], FrameTooLargeError | ProtocolError | None]:
        """Like :meth:`feed`, but return the error instead of raising it.

        Args:
            data: the next bytes of the stream.

        Returns:
            ``(messages, error)``: the messages of the complete frames before
            the first bad one, and the error of that bad frame (or None). After
            an error the decoder is unusable (invariant 2).
        """
        if self._broken:
            return [], ProtocolError(f"{self.stream_name}: decoder already failed; the connection must be closed")
        buf = self._buf
        if buf:
            buf += data
            src = buf
        else:
            src = data
            # Fast path: exactly one small whole frame (the common case for
            # sequential calls and for the in-memory network).
            n = len(data)
            if 4 <= n <= 65536:
                (length,) = _unpack_header(data, 0)
                if length + FRAME_HEADER_BYTES == n and length <= self.max_frame_bytes:
                    try:
                        obj = _unpackb(data[FRAME_HEADER_BYTES:], raw=False, strict_map_key=False)
                    except Exception:
                        pass  # fall through to the general path, which reports the error
                    else:
                        self._offset += n
                        return [obj], None
        n = len(src)
        off = 0
        out: list[Any] = []
        limit = self.max_frame_bytes
        error = None
        mv = memoryview(src)  # one view per feed; frame slices are temporaries
        try:
            while n - off >= FRAME_HEADER_BYTES:
                (length,) = _unpack_header(src, off)
                if length > limit:
                    error = FrameTooLargeError(
                        f"{self.stream_name}: frame at stream offset {self._offset + off} declares "
                        f"{length} bytes, more than max_frame_bytes={limit} "
                        f"(config key ipc.maximum.data.length)",
                        frame_bytes=length,
                        max_frame_bytes=limit,
                    )
                    break
                end = off + FRAME_HEADER_BYTES + length
                if end > n:
                    break
                try:
                    obj = _unpackb(mv[off + FRAME_HEADER_BYTES:end], raw=False, strict_map_key=False)
                except Exception as exc:  # msgpack raises several unrelated types
                    error = ProtocolError(
                        f"{self.stream_name}: undecodable frame of {length} bytes at stream offset "
                        f"{self._offset + off} ({type(exc).__name__}: {exc})",
                        frame_bytes=length,
                    )
                    break
                out.append(obj)
                off = end
        finally:
            mv.release()
        if error is not None:
            return out, self._fail(error)
        self._offset += off
        if src is buf:
            if off:
                del buf[:off]
        elif off < n:
            self._buf = bytearray(src[off:]) if off else bytearray(src)
        return out, None

    def _fail(self, error: Exception) -> Exception:
        self._broken = True
        self._buf = bytearray()
        return error


def check_request(msg: Any) -> tuple[int, str, dict]:
    """Validate the shape of a decoded request.

    Args:
        msg: a decoded frame received by a server.

    Returns:
        ``(request_id, method, kwargs)``.

    Raises:
        ProtocolError: not a request at all (no usable request id); the
            connection cannot answer and must be closed.
        InvalidRequestError: a request with a usable id but a bad method or
            kwargs; ``fields['request_id']`` holds the id so it can be answered.
    """
    if type(msg) is not list or len(msg) != 4 or msg[0] != KIND_REQUEST:
        raise ProtocolError(f"expected a request [0, id, method, kwargs], got {_describe(msg)}")
    request_id = msg[1]
    if type(request_id) is not int:
        raise ProtocolError(f"request id must be an integer, got {_describe(request_id)}")
    method = msg[2]
    if type(method) is not str or not method.isidentifier():
        raise InvalidRequestError(f"bad method name {_describe(method)} in request {request_id}", request_id=request_id)
    kwargs = msg[3]
    if type(kwargs) is not dict:
        raise InvalidRequestError(
            f"call {method}: arguments must be a map of names to values, got {_describe(kwargs)}",
            request_id=request_id,
        )
    for key in kwargs:
        if type(key) is not str:
            raise InvalidRequestError(
                f"call {method}: argument names must be strings, got {_describe(key)}", request_id=request_id
            )
    return request_id, method, kwargs


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"

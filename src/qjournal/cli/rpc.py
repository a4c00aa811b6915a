"""``qjournal rpc``: call any RPC of a running daemon from the command line.

Why: an operator (or a test, or the demo) debugging a cluster needs to ask one
JournalNode or NameNode a single question ("what is your last promised
epoch?", "what is your HA state?") without writing code. Every daemon serves
its calls through :mod:`qjournal.transport`, so one generic client covers them
all: ``qjournal rpc 127.0.0.1:8485 get_journal_state jid=mycluster``.

Arguments are ``name=value``; a value that parses as JSON is used as such
(``since_txid=0``, ``in_progress_ok=true``, ``req='{"jid": "j", ...}'``),
anything else is a string. The result is printed as JSON on stdout (``bytes``
as ``{"$bytes": "<hex>"}``); a remote error is printed on stderr as
``<Type>: <message> <fields>`` with exit status 1. TLS follows the
``qjournal.rpc.tls.*`` keys of the configuration (``--conf``, ``-D``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from qjournal.config.conf import Configuration, split_host_port
from qjournal.errors import InvariantViolation, QJournalError
from qjournal.transport import RpcClient, client_options_from_conf
from qjournal.transport.tls import client_context_from_conf
from qjournal.util.tasks import EXIT_FATAL


def register(subparsers) -> None:
    """Add the ``rpc`` subcommand."""
    p = subparsers.add_parser("rpc")
    p.add_argument("address", metavar="HOST:PORT", help="RPC address of the daemon")
    p.add_argument("method", help="call name, e.g. get_journal_state or get_service_status")
    p.add_argument("args", nargs="*", metavar="NAME=VALUE", help="call arguments (JSON values or strings)")
    p.add_argument("--timeout-ms", type=int, default=20000, help="deadline of the call (default 20000)")
    p.set_defaults(func=_run)


def parse_call_args(items: list[str]) -> dict[str, Any]:
    """Turn ``name=value`` words into call kwargs.

    Args:
        items: the words from the command line.

    Returns:
        ``{name: value}``, each value JSON-decoded when it is valid JSON,
        otherwise kept as a string.

    Raises:
        ValueError: a word without ``=`` or with an empty name (names it).
    """
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"argument {item!r} is not NAME=VALUE")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _run(args) -> int:
    try:
        host, port = split_host_port(args.address)
    except ValueError:
        print(f"qjournal rpc: address {args.address!r} is not HOST:PORT", file=sys.stderr)
        return 2
    try:
        kwargs = parse_call_args(args.args)
    except ValueError as exc:
        print(f"qjournal rpc: {exc}", file=sys.stderr)
        return 2
    try:
        conf = Configuration.from_args(args)
        options = client_options_from_conf(conf)
        ssl_ctx = client_context_from_conf(conf)
    except QJournalError as exc:
        print(f"qjournal rpc: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    async def call() -> Any:
        client = await RpcClient.connect_tcp(host, port, ssl=ssl_ctx, **options)
        try:
            return await client.call(args.method, timeout_ms=args.timeout_ms, **kwargs)
        finally:
            await client.close()

    try:
        result = asyncio.run(call())
    except QJournalError as exc:
        print(f"{type(exc).__name__}: {exc} {json.dumps(_jsonable(exc.fields), sort_keys=True)}", file=sys.stderr)
        return 1
    except InvariantViolation as exc:  # the daemon broke an invariant (and ended): say so, end too
        print(f"InvariantViolation: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_FATAL) from exc
    print(json.dumps(_jsonable(result), sort_keys=True))
    return 0

"""``qjournal haadmin``: manage the HA state of the NameNodes (``hdfs haadmin``).

Why: manual failover and inspection, with the commands and outputs operators
know: ``-getServiceState NN``, ``-getAllServiceState``, ``-checkHealth NN``,
``-transitionToActive [--forcemanual] [--forceactive] NN``,
``-transitionToStandby [--forcemanual] NN``, ``-transitionToObserver NN``
(HDFS-12943: from standby only; refused for the active). NameNode ids are those of
``dfs.ha.namenodes.<ns>`` (``--ns`` picks the nameservice). Moving a NameNode
between standby and observer needs no ``--forcemanual`` under automatic failover:
the ZKFCs keep observers out of the election (``ha_state`` invariant 3).

Commands are a table (:data:`HANDLERS`); ``-failover`` runs
:func:`qjournal.ha.failover.failover` (the failover controller's part).

Exit status: 0 on success, 1 on failure (the message names the NameNode).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from qjournal.config import Configuration
from qjournal.errors import InvalidRequestError, QJournalError
from qjournal.ha.failover import FailoverRequest, failover
from qjournal.namenode.addresses import namenode_ids, rpc_address_of
from qjournal.namenode.dfs_client import HAServiceClient
from qjournal.transport.tls import client_context_from_conf


@dataclass(frozen=True)
class Handler:
    """One haadmin command.

    Attributes:
        fn: ``async fn(ctx, flags, args) -> int`` (exit status).
        usage: the usage line.
        flags: accepted ``--flags``.
        nargs: number of positional arguments.
    """

    fn: Callable[["HAAdminContext", set[str], list[str]], Awaitable[int]]
    usage: str
    flags: tuple[str, ...] = ()
    nargs: int = 1


HANDLERS: dict[str, Handler] = {}


def register_handler(name: str, handler: Handler) -> None:
    """Add (or replace) a command such as ``-failover``."""
    HANDLERS[name] = handler


class HAAdminContext:
    """What a command needs: the configuration, the nameservice and NameNode addresses."""

    def __init__(self, conf: Any, nameservice: str | None) -> None:
        self.conf = conf
        self.nameservice = nameservice or (conf.get_list("dfs.nameservices") or [None])[0]
        self.nn_ids = namenode_ids(conf, self.nameservice) if self.nameservice else []
        self.timeout_ms = int(conf.get_duration_ms("ha.failover-controller.cli-check.rpc-timeout.ms") or 20000)
        self.automatic_failover = bool(conf.get_bool("dfs.ha.automatic-failover.enabled"))
        if self.nameservice:
            v = conf.get_bool(f"dfs.ha.automatic-failover.enabled.{self.nameservice}")
            if v is not None:
                self.automatic_failover = v

    def address(self, nn_id: str) -> tuple[str, int]:
        if nn_id not in self.nn_ids:
            raise InvalidRequestError(f"Unable to determine the address of NameNode {nn_id!r}: not in "
                                      f"dfs.ha.namenodes.{self.nameservice} ({', '.join(self.nn_ids)})")
        return rpc_address_of(self.conf, nn_id, self.nameservice)

    def client(self, nn_id: str) -> Any:
        host, port = self.address(nn_id)
        return HAServiceClient(host, port, self.timeout_ms, ssl=client_context_from_conf(self.conf))


async def _with(ctx: HAAdminContext, nn_id: str, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    c = ctx.client(nn_id)
    try:
        return await fn(c)
    finally:
        await c.close()


async def get_service_state(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    st = await _with(ctx, args[0], lambda c: c.get_service_status())
    print(st["state"])
    return 0


async def get_all_service_state(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    for nn in ctx.nn_ids:
        host, port = ctx.address(nn)
        try:
            st = (await _with(ctx, nn, lambda c: c.get_service_status()))["state"]
        except QJournalError as e:
            st = f"Failed to connect: {e.message}"
        print(f"{host}:{port:<{50 - len(host) - 1}} {st}")
    return 0


async def check_health(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    await _with(ctx, args[0], lambda c: c.monitor_health())
    return 0


def _manual_allowed(ctx: HAAdminContext, flags: set[str], nn: str) -> bool:
    if ctx.automatic_failover and "--forcemanual" not in flags:
        host, port = ctx.address(nn)
        print(f"Automatic failover is enabled for NameNode at {host}:{port}\n"
              f"Refusing to manually manage HA state, since it may cause\n"
              f"a split-brain scenario or other incorrect state.\n"
              f"If you are very sure you know what you are doing, please\n"
              f"specify the --forcemanual flag.", file=sys.stderr)
        return False
    return True


def _source(flags: set[str]) -> str:
    return "user_forced" if "--forcemanual" in flags else "user"


async def transition_to_active(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    nn = args[0]
    if not _manual_allowed(ctx, flags, nn):
        return 1
    if "--forceactive" not in flags:
        for other in ctx.nn_ids:
            if other == nn:
                continue
            try:
                st = await _with(ctx, other, lambda c: c.get_service_status())
            except QJournalError:
                continue
            if st["state"] == "active":
                print(f"transitionToActive: Node {other} is already active", file=sys.stderr)
                return 1
    await _with(ctx, nn, lambda c: c.transition_to_active(_source(flags)))
    return 0


async def transition_to_standby(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    nn = args[0]
    if ctx.automatic_failover and "--forcemanual" not in flags:
        # an observer is out of the election: making it standby again races no ZKFC
        st = await _with(ctx, nn, lambda c: c.get_service_status())
        if st.get("state") != "observer" and not _manual_allowed(ctx, flags, nn):
            return 1
    await _with(ctx, nn, lambda c: c.transition_to_standby(_source(flags)))
    return 0


async def transition_to_observer(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    await _with(ctx, args[0], lambda c: c.transition_to_observer(_source(flags)))
    return 0


register_handler("-getServiceState", Handler(get_service_state, "-getServiceState <serviceId>"))
register_handler("-getAllServiceState", Handler(get_all_service_state, "-getAllServiceState", nargs=0))
register_handler("-checkHealth", Handler(check_health, "-checkHealth <serviceId>"))
register_handler("-transitionToActive", Handler(
    transition_to_active, "-transitionToActive [--forceactive] [--forcemanual] <serviceId>",
    ("--forcemanual", "--forceactive")))
register_handler("-transitionToStandby", Handler(
    transition_to_standby, "-transitionToStandby [--forcemanual] <serviceId>", ("--forcemanual",)))
register_handler("-transitionToObserver", Handler(
    transition_to_observer, "-transitionToObserver [--forcemanual] <serviceId>", ("--forcemanual",)))


async def failover_command(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    src, dst = args
    req = FailoverRequest(conf=ctx.conf, nameservice=ctx.nameservice or "", automatic=ctx.automatic_failover,
                          src=src, dst=dst, src_addr=ctx.address(src), dst_addr=ctx.address(dst),
                          timeout_ms=ctx.timeout_ms, force_fence="--forcefence" in flags,
                          force_active="--forceactive" in flags,
                          ssl_context=client_context_from_conf(ctx.conf))
    print(await failover(req, note=lambda line: print(line, file=sys.stderr)))
    return 0


register_handler("-failover", Handler(failover_command,
                                      "-failover [--forcefence] [--forceactive] <serviceId> <serviceId>",
                                      ("--forcefence", "--forceactive"), nargs=2))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``haadmin`` subcommand."""
    p = subparsers.add_parser("haadmin", description=__doc__.splitlines()[0], prefix_chars="+")
    p.add_argument("++ns", dest="ha_ns", help="nameservice (default: the first of dfs.nameservices)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-COMMAND ARGS")
    p.set_defaults(func=run)


def usage() -> str:
    return "Usage: qjournal haadmin\n" + "\n".join(f"    [{HANDLERS[k].usage}]" for k in sorted(HANDLERS))


def run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if not argv or argv[0] not in HANDLERS:
        print(usage(), file=sys.stderr)
        return 2
    h = HANDLERS[argv[0]]
    flags = {a for a in argv[1:] if a.startswith("--")}
    bad = sorted(f for f in flags if f not in h.flags)
    pos = [a for a in argv[1:] if not a.startswith("--")]
    if bad or len(pos) != h.nargs:
        print(f"{argv[0]}: bad arguments {' '.join(bad) or pos}\nUsage: qjournal haadmin [{h.usage}]",
              file=sys.stderr)
        return 2
    try:
        conf = Configuration.from_args(args)
        ctx = HAAdminContext(conf, args.ha_ns)
        return asyncio.run(h.fn(ctx, flags, pos))
    except QJournalError as e:
        target = f" {pos[0]}" if pos else ""
        print(f"{argv[0][1:]}{target}: {type(e).__name__}: {e.message}", file=sys.stderr)
        return 1


__all__ = ["Handler", "HANDLERS", "register_handler", "HAAdminContext", "run", "register"]

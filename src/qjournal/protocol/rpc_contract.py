"""The vocabulary of an RPC contract: a protocol is a table of methods, each a row of facts.

Why: a protocol stated once, as data, is read by everything that must agree on it: the RPC
server checks and decodes a call's arguments before any handler runs and knows which calls
may run concurrently; a client takes a call's name and deadline key from it and decodes its
answer with it; service-level authorization takes its ACLs from it; the docs' tables are
rendered from it (``tests/test_rpc_contract.py``). Hadoop states each protocol once, as a
Java interface (``QJournalProtocol``, ``ClientProtocol``, ``HAServiceProtocol``, ...); the
tables themselves are :mod:`qjournal.protocol.protocols`.

A row, :class:`RpcMethod`, *is* the method's wire name (a ``str`` subclass, so it travels,
compares and hashes as its name) and carries: its arguments (:class:`Arg`: name, wire type,
default), its result type, whether the JournalNode's epoch gate judges it, whether a server
may run it concurrently with the earlier calls of the same connection (else the calls of a
connection run one at a time in arrival order), the ACL keys admitting it, and the
configuration key of a caller's deadline.

A wire type (:class:`WireType`) decodes one value: ``decode(value, method, argument)``
returns the typed value or raises :class:`~qjournal.errors.InvalidRequestError` naming the
call and the argument. A type without a decoder passes its value on unchanged (the handler,
or the namespace behind it, judges it).

Invariants:

1. A protocol's method names are unique, and every method belongs to exactly one protocol.
2. Rendering is a pure function of the table (the docs are checked against it, never edited
   by hand).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from qjournal.errors import InvalidRequestError, InvariantViolation
from qjournal.protocol.messages import wire_bool, wire_int, wire_str

__all__ = ["WireType", "Arg", "RpcMethod", "RpcProtocol", "REQUIRED", "message_type", "acl_table",
           "render_markdown", "ANY", "INT", "OPT_INT", "BOOL", "STR", "OPT_STR", "BYTES", "STR_LIST", "NONE"]

#: decode(value, method name, argument name) -> the typed value; raises InvalidRequestError
Decoder = Callable[[Any, str, str], Any]


@dataclass(frozen=True, slots=True)
class WireType:
    """How one value travels: its name (for the docs) and its decoder (None: passed on as is)."""

    name: str
    decode: Decoder | None = None


def _bytes(v: Any, method: str, arg: str) -> bytes:
    if type(v) is bytes:
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise InvalidRequestError(f"call {method}: argument {arg!r} must be bytes, got {type(v).__name__}",
                              method=method, field=arg)


def _opt_str(v: Any, method: str, arg: str) -> str | None:
    return None if v is None else wire_str(v, method, arg)


def _str_list(v: Any, method: str, arg: str) -> list:
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise InvalidRequestError(f"call {method}: argument {arg!r} must be a list of strings, got {v!r:.60}",
                                  method=method, field=arg)
    return list(v)


def _int(v: Any, method: str, arg: str) -> int:
    if type(v) is int:  # the common case first: one type check
        return v
    return wire_int(v, f"call {method}", arg)


def _opt_int(v: Any, method: str, arg: str) -> int | None:
    return None if v is None else _int(v, method, arg)


def _bool(v: Any, method: str, arg: str) -> bool:
    return wire_bool(v, f"call {method}", arg)


def _str(v: Any, method: str, arg: str) -> str:
    if type(v) is str:
        return v
    return wire_str(v, f"call {method}", arg)


def _none(v: Any, method: str, arg: str) -> None:
    if v is not None:
        raise InvalidRequestError(f"call {method}: {arg} must be None, got {v!r:.60}", method=method, field=arg)
    return None


ANY = WireType("any")
INT = WireType("int", _int)
OPT_INT = WireType("int or None", _opt_int)
BOOL = WireType("bool", _bool)
STR = WireType("str", _str)
OPT_STR = WireType("str or None", _opt_str)
BYTES = WireType("bytes", _bytes)
STR_LIST = WireType("[str]", _str_list)
#: a call that answers nothing
NONE = WireType("None", _none)


def message_type(cls: Any, name: str | None = None) -> WireType:
    """The wire type of a :mod:`qjournal.protocol.messages` class (``cls.from_wire``), its errors
    naming the call and the argument."""
    from_wire = cls.from_wire

    def decode(v: Any, method: str, arg: str) -> Any:
        try:
            return from_wire(v)
        except InvalidRequestError as e:
            raise InvalidRequestError(f"call {method}: argument {arg!r}: {e.message}", method=method,
                                      field=arg) from e
    return WireType(name or cls.__name__, decode)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: the default of an argument a caller must send
REQUIRED: Any = _Required()


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a call.

    Attributes:
        name: its keyword.
        type: its wire type.
        default: :data:`REQUIRED`, or the value the handler assumes when it is not sent.
        text: how the docs show it (default: the name, with ``=default`` when optional).
    """

    name: str
    type: WireType = ANY
    default: Any = REQUIRED
    text: str | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def shown(self) -> str:
        if self.text is not None:
            return self.text
        return self.name if self.required else f"{self.name}={self.default!r}"


class RpcMethod(str):
    """One row of a protocol table: the method's wire name, with the facts about it (module docstring).

    Attributes:
        name: the wire name as a plain ``str`` (what a client puts in its frame).
        args: the arguments, in the order the docs show them.
        result: the answer's wire type (a client decodes with ``result.decode``).
        result_doc: the answer, for the docs.
        epoch_checked: the JournalNode's epoch gate judges the call (its ``req`` argument).
        concurrent: a server may start it while earlier calls of the connection still run.
        acl: the ACL keys admitting it (set by its protocol unless given).
        timeout_key: the configuration key of a caller's deadline for it (None: the caller's own).
        protocol: the name of its protocol (set by :class:`RpcProtocol`).
        doc: one line for the docs.
    """

    name: str
    args: tuple[Arg, ...]
    result: WireType
    result_doc: str
    epoch_checked: bool
    concurrent: bool
    acl: tuple[str, ...]
    timeout_key: str | None
    protocol: str
    doc: str

    def __new__(cls, name: str, *, args: tuple[Arg, ...] = (), result: WireType = NONE, result_doc: str = "None",
                epoch_checked: bool = False, concurrent: bool = False, acl: tuple[str, ...] = (),
                timeout_key: str | None = None, doc: str = "") -> "RpcMethod":
        self = super().__new__(cls, name)
        self.name = str(name)
        self.args = tuple(args)
        self.result = result
        self.result_doc = result_doc
        self.epoch_checked = epoch_checked
        self.concurrent = concurrent
        self.acl = tuple(acl)
        self.timeout_key = timeout_key
        self.protocol = ""
        self.doc = doc
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise InvariantViolation(f"RPC method {name}: an argument is listed twice: {names}")
        return self

    def __reduce__(self) -> Any:
        return (str, (self.name,))  # pickled (a history sent between processes) as its plain name

    @property
    def arg_names(self) -> frozenset[str]:
        return frozenset(a.name for a in self.args)

    @property
    def required_args(self) -> frozenset[str]:
        return frozenset(a.name for a in self.args if a.required)


class RpcProtocol:
    """A protocol: a named table of :class:`RpcMethod` rows, in the order the docs show them.

    Methods are reached as attributes (``QJOURNAL.journal``) or by name (``QJOURNAL["journal"]``).

    Args:
        name: Hadoop's interface name (``QJournalProtocol``).
        acl: the ACL key of the protocol (each method's ``acl`` defaults to ``(acl,)``).
        methods: the rows.
        hidden_args: arguments every call carries that the docs state once, not per row.
        doc: what the docs say about the protocol.

    Raises:
        InvariantViolation: a method listed twice (invariant 1).
    """

    def __init__(self, name: str, acl: str, methods: tuple[RpcMethod, ...], *,
                 hidden_args: tuple[str, ...] = (), doc: str = "") -> None:
        self.name = name
        self.acl = acl
        self.hidden_args = hidden_args
        self.doc = doc
        self._methods: dict[str, RpcMethod] = {}
        for m in methods:
            if m.name in self._methods or m.protocol:
                raise InvariantViolation(f"{name}: method {m.name} listed twice or in two protocols")
            m.protocol = name
            if not m.acl:
                m.acl = (acl,)
            self._methods[m.name] = m

    def __getattr__(self, name: str) -> RpcMethod:
        try:
            return self.__dict__["_methods"][name]
        except KeyError:
            raise AttributeError(f"{self.__dict__.get('name', '?')} has no method {name!r}") from None

    def __getitem__(self, name: str) -> RpcMethod:
        return self._methods[name]

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def __iter__(self) -> Iterator[RpcMethod]:
        return iter(self._methods.values())

    def __len__(self) -> int:
        return len(self._methods)

    def __repr__(self) -> str:
        return f"RpcProtocol({self.name}, {len(self._methods)} methods)"


def acl_table(*protocols: RpcProtocol) -> dict[str, tuple[str, ...]]:
    """RPC method name -> the ACL keys admitting it, over the protocols a daemon serves.

    Raises:
        InvariantViolation: two protocols serve a method of the same name.
    """
    out: dict[str, tuple[str, ...]] = {}
    for p in protocols:
        for m in p:
            if m.name in out:
                raise InvariantViolation(f"method {m.name} is served by two protocols")
            out[m.name] = m.acl
    return out


def render_markdown(protocol: RpcProtocol, acl_names: dict[str, str] | None = None) -> str:
    """The docs' table of a protocol (invariant 2): method, arguments, result, order, ACL, deadline key."""
    names = acl_names or {}
    lines = ["| method | kwargs | result | order | ACL | deadline |", "|---|---|---|---|---|---|"]
    for m in protocol:
        args = ", ".join(a.shown() for a in m.args if a.name not in protocol.hidden_args) or "–"
        order = "concurrent" if m.concurrent else "FIFO"
        acl = " or ".join(names.get(k, k) for k in m.acl)
        timeout = f"`{m.timeout_key}`" if m.timeout_key else "–"
        result = m.result_doc.replace("|", "\\|")  # a cell's own bars are escaped (GitHub markdown)
        lines.append(f"| `{m.name}` | {args} | {result} | {order} | {acl} | {timeout} |")
    return "\n".join(lines) + "\n"

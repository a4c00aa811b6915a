"""The RPC contract as data (issue 26): every protocol a daemon serves is one table
(``qjournal.protocol.protocols``), and everything that must agree on a call reads it.

Checked here, with ``ast`` over ``src/qjournal`` and the handlers themselves:

* every handler serves exactly its tables' methods, with exactly the table's arguments (names, and
  which are required), and names its tables (so the RPC server decodes and orders by them);
* no RPC method name is spelled as a string anywhere in ``src/`` outside the tables: not as the
  name of a call, not compared with a method, not in a collection of method names;
* the tables in docs/architecture.md are the tables rendered (``QJOURNAL_REWRITE_DOCS=1`` rewrites
  them);
* every deadline key a table names is a configuration key, and the simulator serves the
  JournalNode through the daemon's own service class.
"""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import re

import pytest

from qjournal.config.keys import KEYS
from qjournal.ha.zkfc import ZKFailoverController
from qjournal.journalnode.service import JournalNodeService
from qjournal.namenode.admin_protocol import AdminProtocolHandler
from qjournal.namenode.client_protocol import ClientProtocolHandler
from qjournal.namenode.ha_service import HAService
from qjournal.namenode.namenode_protocol import NamenodeProtocolHandler
from qjournal.protocol import protocols as P
from qjournal.protocol.rpc_contract import RpcMethod, render_markdown
from qjournal.security.service_auth import PROTOCOL_NAMES, ServiceAuthorization

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "qjournal"
DOCS = ROOT / "docs" / "architecture.md"
#: the only modules that may spell a method's name
TABLE_MODULES = {SRC / "protocol" / "protocols.py"}
METHOD_NAMES = {m.name for p in P.ALL_PROTOCOLS for m in p}

HANDLERS = [
    (JournalNodeService, (P.QJOURNAL,)),
    (ClientProtocolHandler, (P.CLIENT,)),
    (AdminProtocolHandler, (P.DFSADMIN,)),
    (HAService, (P.HA_SERVICE,)),
    (NamenodeProtocolHandler, (P.NAMENODE,)),
    (ZKFailoverController, (P.ZKFC,)),
    (ServiceAuthorization, (P.REFRESH_POLICY, P.REFRESH_USER_MAPPINGS)),
]


@pytest.mark.parametrize("cls, tables", HANDLERS, ids=lambda x: getattr(x, "__name__", ""))
def test_each_handler_serves_exactly_its_tables(cls, tables):
    assert tuple(cls.rpc_protocols) == tables
    served = {n[4:]: f for n, f in inspect.getmembers(cls, inspect.iscoroutinefunction) if n.startswith("rpc_")}
    rows = {m.name: m for t in tables for m in t}
    assert sorted(served) == sorted(rows)
    for name, fn in sorted(served.items()):
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.name not in ("self", "_peer") and p.kind is not p.VAR_KEYWORD]
        assert not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()), name
        assert [p.name for p in params] == [a.name for a in rows[name].args], name
        required = {p.name for p in params if p.default is inspect.Parameter.empty}
        assert required == rows[name].required_args, name
        defaults = {p.name: p.default for p in params if p.name not in required}
        assert defaults == {a.name: a.default for a in rows[name].args if not a.required}, name


def test_every_method_is_in_one_protocol_and_every_deadline_key_exists():
    seen: dict[str, str] = {}
    for p in P.ALL_PROTOCOLS:
        for m in p:
            assert isinstance(m, RpcMethod) and m.protocol == p.name
            assert m.name not in seen, f"{m.name} in {seen.get(m.name)} and {p.name}"
            seen[m.name] = p.name
            assert m.timeout_key is None or m.timeout_key in KEYS, (m.name, m.timeout_key)
            assert all(k in PROTOCOL_NAMES for k in m.acl), m.name
    assert {m.name for m in P.QJOURNAL if m.epoch_checked} == {
        "start_log_segment", "journal", "heartbeat", "finalize_log_segment", "purge_logs", "prepare_recovery",
        "accept_recovery"}
    assert all(m.args[0].name == "req" for m in P.QJOURNAL if m.epoch_checked)


# --- no method name outside the tables ----------------------------------------------------------------

def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants of ``node``, or of a tuple/list/set/frozenset/dict literal it builds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _strings(e)]
    if isinstance(node, ast.Dict):
        return [c for k in node.keys if k is not None for c in _strings(k)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set",
                                                                                          "tuple") and node.args:
        return _strings(node.args[0])
    return []


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


#: a call that names an RPC method: it makes the call (``call``, ``send``, ``call_on``, ``fan_out``, ...) or
#: judges it by name (the HA gate, the safe-mode check, the handlers' ``_read``/``_write``/``_caller``)
_CALLS = re.compile(r"(^|_)(call|call_on|send|rpc|submit|query_all|fan_out|read|write)$|^_?call|"
                    r"^check_(operation|safe_mode)$", re.I)


def _names_a_method(node: ast.AST) -> bool:
    """``method``, ``op.method``, ``self._method``...: an expression that holds an RPC method."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "method" in name.lower()


def _collection_names(node: ast.AST) -> list[ast.Constant]:
    """The method names of a collection literal made of two or more of them and nothing else (a dict:
    of its keys, or of its values)."""
    groups = ([list(node.keys), list(node.values)] if isinstance(node, ast.Dict)
              else [list(node.elts)] if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
    out = []
    for group in groups:
        strings = [e for e in group if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(strings) >= 2 and len(strings) == len(group) and all(c.value in METHOD_NAMES for c in strings):
            out += strings
    return out


def method_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each RPC method name spelled as a string: an argument of a call that names
    its RPC, an operand of a comparison with a method, or a collection literal of method names."""
    out = []
    for node in ast.walk(tree):
        found: list[ast.Constant] = []
        if isinstance(node, ast.Call) and _CALLS.search(_callee(node)):
            for a in [*node.args, *(k.value for k in node.keywords)]:
                found += _strings(a)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_a_method(o) for o in operands):
                for operand in operands:
                    found += _strings(operand)
        else:
            found += _collection_names(node)
        out += [(c.lineno, c.value) for c in found if c.value in METHOD_NAMES]
    return sorted(set(out))


def test_no_rpc_method_name_is_spelled_outside_the_tables():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path in TABLE_MODULES:
            continue
        for line, name in method_literals(ast.parse(path.read_text())):
            bad.append(f"{path.relative_to(SRC.parent)}:{line}: {name!r}")
    assert not bad, ("RPC method names spelled as strings outside qjournal/protocol/protocols.py (use the "
                     "protocol table's row, e.g. QJOURNAL.journal):\n" + "\n".join(bad))


@pytest.mark.parametrize("source, flagged", [
    ("await c.call('journal', req=r)", ["journal"]),
    ("await self._call(peer, 'get_journal_state', jid=j)", ["get_journal_state"]),
    ("x = method == 'mkdirs'", ["mkdirs"]),
    ("x = op.method in ('create', 'mkdirs')", ["create", "mkdirs"]),
    ("x = action == 'rename'", []),                 # not a method: a word
    ("W = ('mkdirs', 'create')", ["create", "mkdirs"]),
    ("T = {'rename': 'Cannot rename', 'delete': 'Cannot delete'}", ["delete", "rename"]),
    ("A = ((1, 'create'), (2, 'chmod'))", []),      # a generator's actions, not methods
    ("nn.check_operation(OpCategory.WRITE, 'create')", ["create"]),
    ("await c.call(CLIENT.mkdirs, path=p)", []),
    ("op = 'format'", []),                          # one word, not a call of it
    ("storage.delete('x')", []),
])
def test_the_literal_rule_itself(source, flagged):
    assert [n for _, n in method_literals(ast.parse(source))] == flagged


# --- the docs' tables are rendered from the protocol tables ---------------------------------------------

DOC_TABLES = [P.QJOURNAL, P.CLIENT, P.DFSADMIN, P.NAMENODE, P.HA_SERVICE, P.ZKFC]


def _section(text: str, protocol) -> tuple[int, int]:
    begin = f"<!-- rpc-table {protocol.name} (rendered from qjournal/protocol/protocols.py; tests/test_rpc_contract.py) -->\n"
    i = text.find(begin)
    assert i >= 0, f"docs/architecture.md has no table of {protocol.name} (marker {begin.strip()!r})"
    j = text.find("<!-- /rpc-table -->", i)
    assert j > i
    return i + len(begin), j


def test_the_docs_tables_are_the_protocol_tables():
    text = DOCS.read_text()
    names = {k: f"`{k}`" for k in PROTOCOL_NAMES}
    if os.environ.get("QJOURNAL_REWRITE_DOCS"):
        for p in DOC_TABLES:
            i, j = _section(text, p)
            text = text[:i] + render_markdown(p, names) + text[j:]
        DOCS.write_text(text)
    for p in DOC_TABLES:
        i, j = _section(text, p)
        assert text[i:j] == render_markdown(p, names), (
            f"the {p.name} table in docs/architecture.md is not the protocol table rendered; run "
            f"QJOURNAL_REWRITE_DOCS=1 pytest tests/test_rpc_contract.py to rewrite it")
    assert "`with_digests`" in text or "with_digests" in render_markdown(P.QJOURNAL)


# --- the simulator serves the daemon's JournalNode ------------------------------------------------------

def test_the_simulator_maps_no_rpc_itself():
    for path in sorted((SRC / "sim").rglob("*.py")):
        defs = [n.name for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("rpc_")]
        assert not defs, f"{path.name} serves RPCs itself: {defs}"

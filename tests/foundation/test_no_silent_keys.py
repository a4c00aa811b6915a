"""No silent keys (issue 15 part 4): every key in the table is read by some code.

Why: a key that is accepted and then ignored tells the operator a setting took
effect when it did not. The table in ``qjournal.config.keys`` is the list of
what an operator may set, so each entry must be consumed somewhere, or be
removed, or be listed in ``keys.UNSUPPORTED`` (then setting it is an error that
says why).

How "read" is found: every string literal in ``src/qjournal`` except
``config/keys.py`` and docstrings (an f-string contributes its literal parts).
A key counts as read when its name, or for a template its prefix before the
first ``<`` (``dfs.ha.namenodes.``), is a substring of such a literal. That
also finds keys consumed through a settings table (``client/settings.py``).
It is a lower bound on honesty, not a proof: a key mentioned only in a log
message would pass, which review has to catch.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from qjournal.config import keys as K
from qjournal.config.conf import Configuration
from qjournal.errors import ConfigError

SRC = pathlib.Path(K.__file__).resolve().parents[1]

#: keys that no qjournal code reads on purpose, with the reason.
NOT_READ_BY_QJOURNAL = {
    # Hadoop's own client (FsShell, WebHdfsFileSystem) reads it from the same
    # conf dir; qjournal accepts it so one core-site.xml serves both.
    "fs.defaultFS": "read by Hadoop's client sharing the configuration directory",
}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _literals(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def _code_literals() -> str:
    keys_py = SRC / "config" / "keys.py"
    out = [s for p in sorted(SRC.rglob("*.py")) if p != keys_py for s in _literals(p)]
    # defaults that substitute another key (``${hadoop.tmp.dir}``) read it too
    out += [k.default for k in K.KEYS.values() if k.default and "${" in k.default]
    return "\n".join(out)


def _stem(name: str) -> str:
    return name.split("<", 1)[0]


def test_every_key_is_read_somewhere():
    text = _code_literals()
    silent = [name for name in K.KEYS
              if name not in NOT_READ_BY_QJOURNAL and _stem(name) not in text]
    assert not silent, ("keys defined in config/keys.py that no code in src/qjournal reads; honour them, "
                        "remove them, or list them in keys.UNSUPPORTED:\n  " + "\n  ".join(silent))


def test_the_scanner_sees_literals_not_docstrings(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""mentions dfs.only.in.docstring"""\n'
                 'def f(ns):\n    """also dfs.doc.only"""\n    return conf.get(f"dfs.ha.namenodes.{ns}")\n')
    lits = "\n".join(_literals(f))
    assert "dfs.ha.namenodes." in lits
    assert "dfs.only.in.docstring" not in lits and "dfs.doc.only" not in lits


def test_allowlist_names_only_defined_keys():
    assert set(NOT_READ_BY_QJOURNAL) <= set(K.KEYS)


def test_unsupported_keys_are_not_also_defined():
    assert not set(K.UNSUPPORTED) & set(K.KEYS)


@pytest.mark.parametrize("name", sorted(K.UNSUPPORTED))
def test_setting_an_unsupported_key_names_it_and_says_why(name, tmp_path):
    with pytest.raises(ConfigError, match=f"{name!r} is not supported by qjournal"):
        Configuration().set(name, "1")
    (tmp_path / "hdfs-site.xml").write_text(
        f"<configuration><property><name>{name}</name><value>1</value></property></configuration>")
    with pytest.raises(ConfigError, match="hdfs-site.xml.*not supported"):
        Configuration.load(str(tmp_path))

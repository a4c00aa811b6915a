"""Hadoop-style XML configuration: ``core-site.xml`` + ``hdfs-site.xml`` + ``-D`` overrides.

Why: operators of HDFS already know how to configure a quorum journal
(``dfs.namenode.shared.edits.dir``, ``dfs.qjournal.*.timeout.ms``, ...). qjournal
reads the same files with the same names and defaults, so the knowledge and
the files carry over.

Theory of operation:

* Sources, lowest precedence first: the defaults of :mod:`qjournal.config.keys`,
  ``<dir>/core-site.xml``, ``<dir>/hdfs-site.xml``, ``<dir>/hadoop-policy.xml``
  (the service-level ACLs, as Hadoop's ``ServiceAuthorizationManager`` adds it
  on top), then ``-D key=value`` overrides, then :meth:`Configuration.set`.
  :meth:`Configuration.reload` reads the same sources again (the directory's
  files as they are now): how ``dfsadmin -refreshServiceAcl`` picks up an edited
  policy without a restart. A missing file is fine; a file
  that exists but does not parse is a :class:`ConfigError` naming it.
* Values are kept as strings (as in Hadoop) and converted by the typed getters.
  Every value that comes from a file or an override is parsed under its key's
  kind when it arrives, so a malformed value fails at start-up, naming the
  key and where it came from (file path, ``-D`` or ``set()``).
* ``${name}`` inside a value expands to another key's value (or ``user.name``,
  or ``env.VAR``), as Hadoop does; expansion depth is bounded.

Invariants:

1. Every key held is a known key (:func:`qjournal.config.keys.lookup`);
   an unknown key raises ``ConfigError`` naming the key and its source, and so
   does a Hadoop key qjournal does not support (``keys.UNSUPPORTED``), with
   the reason: accepting it and then ignoring it would lie to the operator.
2. Every value held parses under its key's kind (checked on arrival).
3. Iteration (``items()``, ``write_xml``) is in sorted key order.
"""

from __future__ import annotations

import getpass
import os
import re
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping

from qjournal.config import keys as K
from qjournal.errors import ConfigError
from qjournal.util.fs import atomic_write

#: files read from a configuration directory, in order
SITE_FILES = ("core-site.xml", "hdfs-site.xml", "hadoop-policy.xml")
CONF_DIR_ENV = "QJOURNAL_CONF_DIR"

_DURATION_SUFFIX_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0,
                       "h": 3600000.0, "d": 86400000.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_BYTES_SUFFIX = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}
_BYTES = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_VAR = re.compile(r"\$\{([^}$\s]+)\}")
_MAX_SUBST_DEPTH = 20


def split_host_port(text: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) as ``(host, port)``.

    Args:
        text: the address, e.g. ``127.0.0.1:8485`` or ``[::1]:8485``.

    Returns:
        The host (brackets removed) and the port.

    Raises:
        ValueError: its text says what was expected (``host:port``, a numeric
            port, a port between 0 and 65535).
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError("host:port")
    try:
        p = int(port)
    except ValueError:
        raise ValueError("host:port with a numeric port") from None
    if not 0 <= p <= 65535:
        raise ValueError("a port between 0 and 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host, p)


def _parse(key: K.Key, name: str, raw: str, where: str) -> Any:
    """Convert one string value under its key's kind.

    Raises:
        ConfigError: naming the key, the value and ``where``.
    """
    kind = key.kind
    text = raw.strip()

    def bad(expect: str) -> ConfigError:
        return ConfigError(f"{where}: configuration key {name!r} has malformed value {raw!r}: "
                           f"expected {expect}", key=name, value=raw, source=where)

    if kind == "str":
        return raw
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise bad("an integer") from None
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise bad("a number") from None
    if kind == "bool":
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        raise bad("true or false")
    if kind == "duration":
        m = _DURATION.match(text)
        if not m:
            raise bad(f"a duration such as 500ms, 30s, 2m or a bare number of {key.unit}")
        number, suffix = float(m.group(1)), m.group(2).lower()
        if not suffix:
            suffix = key.unit
        if suffix not in _DURATION_SUFFIX_MS:
            raise bad("a duration unit among ns, us, ms, s, m, h, d")
        return int(round(number * _DURATION_SUFFIX_MS[suffix]))
    if kind == "bytes":
        m = _BYTES.match(text)
        if not m:
            raise bad("a byte count such as 65536, 64k, 10m or 1g")
        return int(m.group(1)) * _BYTES_SUFFIX[m.group(2).lower()]
    if kind == "list":
        return [item.strip() for item in raw.split(",") if item.strip()]
    if kind == "address":
        try:
            return split_host_port(text)
        except ValueError as e:
            raise bad(str(e)) from None
    raise AssertionError(f"unknown kind {kind}")  # keys.define refuses it


class Configuration:
    """A set of configuration values with Hadoop's names, sources and precedence.

    Build with :meth:`load` (files and overrides), :meth:`from_args` (the CLI)
    or ``Configuration()`` (defaults only, plus :meth:`set`).
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, str] = {}
        self._sources: dict[str, str] = {}
        #: the directory the files were read from (None: no files), for :meth:`reload`
        self.conf_dir: str | None = None
        for name, value in (values or {}).items():
            self.set(name, value)

    # -- construction ------------------------------------------------------------
    @classmethod
    def load(cls, conf_dir: str | None = None,
             overrides: Mapping[str, Any] | Iterable[str] | None = None) -> "Configuration":
        """Read ``core-site.xml`` then ``hdfs-site.xml`` from a directory, then apply overrides.

        Args:
            conf_dir: the configuration directory; None uses ``$QJOURNAL_CONF_DIR``
                (and no files at all when that is unset too).
            overrides: a mapping, or ``KEY=VALUE`` strings as given to ``-D``.

        Returns:
            The configuration.

        Raises:
            ConfigError: the directory does not exist, a file is not valid XML
                or not a Hadoop configuration, or a key is unknown or malformed
                (naming key and file).
        """
        conf = cls()
        if conf_dir is None:
            conf_dir = os.environ.get(CONF_DIR_ENV) or None
        if conf_dir is not None:
            if not os.path.isdir(conf_dir):
                raise ConfigError(f"configuration directory {conf_dir!r} does not exist "
                                  f"(from --conf or ${CONF_DIR_ENV})", path=conf_dir)
            conf.conf_dir = os.path.abspath(conf_dir)
            for fname in SITE_FILES:
                path = os.path.join(conf_dir, fname)
                if os.path.exists(path):
                    conf.add_resource(path)
        conf.apply_overrides(overrides or {})
        return conf

    def reload(self) -> "Configuration":
        """The same sources read again: the configuration directory's files as they are now, then
        this configuration's ``-D`` and ``set()`` values (module docstring).

        Returns:
            A new configuration; this one is unchanged.

        Raises:
            ConfigError: as :meth:`load` (a file edited into a bad state).
        """
        fresh = Configuration.load(self.conf_dir) if self.conf_dir is not None else Configuration()
        for where in ("-D", "set()"):
            for name, value in self._values.items():
                if self._sources.get(name) == where:
                    fresh._put(name, value, where)
        return fresh

    @classmethod
    def from_args(cls, args: Any) -> "Configuration":
        """Configuration from the parsed ``qjournal`` command line (``--conf DIR``, ``-D K=V``).

        Args:
            args: an ``argparse.Namespace`` with optional ``conf`` and ``overrides``.

        Raises:
            ConfigError: as :meth:`load`.
        """
        return cls.load(getattr(args, "conf", None), getattr(args, "overrides", None) or [])

    def add_resource(self, path: str) -> None:
        """Read one Hadoop XML file; its values override what is already held.

        Raises:
            ConfigError: unreadable or malformed file, unknown key or bad value
                (naming the file).
        """
        try:
            tree = ET.parse(path)
        except ET.ParseError as e:
            raise ConfigError(f"{path}: not valid XML: {e}", path=path) from None
        except OSError as e:
            raise ConfigError(f"{path}: cannot read: {e.strerror}", path=path) from None
        root = tree.getroot()
        if root.tag != "configuration":
            raise ConfigError(f"{path}: root element is <{root.tag}>, expected <configuration>",
                              path=path)
        for i, prop in enumerate(root):
            if prop.tag != "property":
                continue
            name_el = prop.find("name")
            if name_el is None or not (name_el.text or "").strip():
                raise ConfigError(f"{path}: property #{i + 1} has no <name>", path=path)
            name = (name_el.text or "").strip()
            value_el = prop.find("value")
            value = "" if value_el is None or value_el.text is None else value_el.text
            self._put(name, value, path)

    def apply_overrides(self, overrides: Mapping[str, Any] | Iterable[str]) -> None:
        """Apply ``-D`` overrides (a mapping or ``KEY=VALUE`` strings).

        Raises:
            ConfigError: an item without ``=``, an unknown key or a bad value.
        """
        if isinstance(overrides, Mapping):
            pairs = [(k, v) for k, v in overrides.items()]
        else:
            pairs = []
            for item in overrides:
                name, sep, value = str(item).partition("=")
                if not sep or not name.strip():
                    raise ConfigError(f"-D {item!r}: expected KEY=VALUE", override=item)
                pairs.append((name.strip(), value))
        for name, value in pairs:
            self._put(name, _to_text(value), "-D")

    def set(self, name: str, value: Any) -> None:
        """Set one key programmatically (highest precedence); ``None`` unsets it.

        Raises:
            ConfigError: unknown key or malformed value.
        """
        if value is None:
            if K.lookup(name) is None:
                raise ConfigError(f"set(): unknown configuration key {name!r}", key=name, source="set()")
            self.unset(name)
            return
        self._put(name, _to_text(value), "set()")

    def unset(self, name: str) -> None:
        """Forget an explicit value so the default applies again."""
        self._values.pop(name, None)
        self._sources.pop(name, None)

    def copy(self) -> "Configuration":
        """An independent copy (values and their sources)."""
        c = Configuration()
        c._values = dict(self._values)
        c._sources = dict(self._sources)
        c.conf_dir = self.conf_dir
        return c

    def _put(self, name: str, value: str, where: str) -> None:
        why = K.unsupported(name)
        if why is not None:
            raise ConfigError(f"{where}: configuration key {name!r} is not supported by qjournal: {why}",
                              key=name, source=where)
        key = K.lookup(name)
        if key is None:
            raise ConfigError(f"{where}: unknown configuration key {name!r}", key=name, source=where)
        if "${" not in value:
            _parse(key, name, value, where)  # invariant 2; substituted values are checked on read
        self._values[name] = value
        self._sources[name] = where

    # -- reading ---------------------------------------------------------------------
    def _key(self, name: str) -> K.Key:
        key = K.lookup(name)
        if key is None:
            raise ConfigError(f"unknown configuration key {name!r}", key=name)
        return key

    def get_raw(self, name: str) -> str | None:
        """The string value after ``${...}`` substitution, or None when unset.

        Raises:
            ConfigError: unknown key, or a substitution loop.
        """
        key = self._key(name)
        raw = self._values.get(name, key.default)
        if raw is None:
            return None
        return self._substitute(name, raw)

    def _substitute(self, name: str, raw: str) -> str:
        value = raw
        for _ in range(_MAX_SUBST_DEPTH):
            m = _VAR.search(value)
            if m is None:
                return value
            var = m.group(1)
            if var == "user.name":
                rep = _user_name()
            elif var.startswith("env."):
                rep = os.environ.get(var[4:], "")
            elif K.lookup(var) is not None:
                key = K.lookup(var)
                assert key is not None
                inner = self._values.get(var, key.default)
                rep = "" if inner is None else inner
            else:
                raise ConfigError(f"{self.source(name)}: configuration key {name!r}: "
                                  f"${{{var}}} names no known key", key=name)
            value = value[:m.start()] + rep + value[m.end():]
        raise ConfigError(f"{self.source(name)}: configuration key {name!r}: "
                          f"substitution deeper than {_MAX_SUBST_DEPTH} (a loop?)", key=name)

    def _typed(self, name: str, kinds: tuple[str, ...]) -> Any:
        key = self._key(name)
        if key.kind not in kinds:
            raise ConfigError(f"configuration key {name!r} is a {key.kind}, not a {'/'.join(kinds)}",
                              key=name)
        raw = self.get_raw(name)
        if raw is None:
            return None
        return _parse(key, name, raw, self.source(name))

    def source(self, name: str) -> str:
        """Where a key's value came from: a file path, ``-D``, ``set()`` or ``default``."""
        return self._sources.get(name, "default")

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value as a string (``default`` when unset and without a default).

        Raises:
            ConfigError: unknown key.
        """
        raw = self.get_raw(name)
        return default if raw is None else raw

    def get_int(self, name: str, default: int | None = None) -> int | None:
        """An ``int`` (or ``bytes``) key as an integer.

        Raises:
            ConfigError: unknown key, wrong kind, or malformed value (naming its source).
        """
        v = self._typed(name, ("int", "bytes"))
        return default if v is None else v

    def get_float(self, name: str, default: float | None = None) -> float | None:
        """A ``float`` (or ``int``) key as a float."""
        v = self._typed(name, ("float", "int"))
        return default if v is None else float(v)

    def get_bytes(self, name: str, default: int | None = None) -> int | None:
        """A ``bytes`` key (``64k``, ``10m``) as an integer number of bytes."""
        v = self._typed(name, ("bytes", "int"))
        return default if v is None else v

    def get_bool(self, name: str, default: bool | None = None) -> bool | None:
        """A ``bool`` key."""
        v = self._typed(name, ("bool",))
        return default if v is None else v

    def get_duration_ms(self, name: str, default: int | None = None) -> int | None:
        """A ``duration`` key in milliseconds (a bare number is in the key's own unit)."""
        v = self._typed(name, ("duration",))
        return default if v is None else v

    def get_list(self, name: str) -> list[str]:
        """A ``list`` key (comma separated); ``[]`` when unset. Other kinds give a one-item list."""
        key = self._key(name)
        raw = self.get_raw(name)
        if raw is None:
            return []
        if key.kind != "list":
            return [raw.strip()] if raw.strip() else []
        return _parse(key, name, raw, self.source(name))

    def get_address(self, name: str, default: tuple[str, int] | None = None) -> tuple[str, int] | None:
        """An ``address`` key as ``(host, port)``."""
        v = self._typed(name, ("address",))
        return default if v is None else v

    def is_set(self, name: str) -> bool:
        """True when the key has an explicit value (not just its default)."""
        return name in self._values

    def items(self, include_defaults: bool = False) -> list[tuple[str, str]]:
        """``(key, raw value)`` pairs in sorted key order (invariant 3).

        Args:
            include_defaults: also list non-template keys that only have a default.
        """
        out = dict(self._values)
        if include_defaults:
            for name, key in K.KEYS.items():
                if not key.is_template and name not in out and key.default is not None:
                    out[name] = key.default
        return sorted(out.items())

    # -- writing -----------------------------------------------------------------------
    def to_xml(self) -> bytes:
        """The explicitly set values as a Hadoop ``<configuration>`` document."""
        root = ET.Element("configuration")
        for name, value in self.items():
            prop = ET.SubElement(root, "property")
            ET.SubElement(prop, "name").text = name
            ET.SubElement(prop, "value").text = value
        ET.indent(root)
        return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"

    def write_xml(self, path: str) -> None:
        """Write the explicitly set values as a Hadoop XML file (atomically, fsynced).

        Raises:
            OSError: the file cannot be written.
        """
        atomic_write(path, self.to_xml())

    def __repr__(self) -> str:
        return f"Configuration({len(self._values)} explicit keys)"


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int):
        return f"{value[0]}:{value[1]}"  # an address
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in a container: fall back to the uid
        return str(os.getuid())


def _check_defaults() -> None:
    """Invariant 2 of keys.py: every literal default parses under its kind."""
    for name, key in K.KEYS.items():
        if key.default is not None and "${" not in key.default:
            _parse(key, name, key.default, "keys.py default")


_check_defaults()

"""The systemd units shipped with qjournal, and what their ``[Service]`` sections say.

Why parse our own units: the units in ``systemd/`` are the one source of every daemon's command
line, environment, account, file limit and log file. The test hosts (:mod:`qjournal.hosts.services`)
start exactly what a unit's ``ExecStart=`` says, read from the unit file a host has installed, so a
unit that is wrong fails the tests instead of the first real deployment. ``systemd-analyze verify``
checks them as systemd would (``tests/hosts``).

The parser knows the part of systemd's unit syntax the shipped units use: sections, ``Key=Value``
lines, comments, repeated keys (``Environment=``), backslash line continuation. It refuses what it
does not model rather than guess: ``%`` specifiers and ``-``/``@``/``+``/``!`` prefixes in
``ExecStart=``.
"""

from __future__ import annotations

import importlib.resources
import os
import shlex
from dataclasses import dataclass, field

from qjournal.errors import ConfigError
from qjournal.util.fs import atomic_write

__all__ = ["ServiceUnit", "parse_unit", "unit_text", "unit_names", "units_for_roles", "write_units",
           "ROLE_UNITS"]

#: the unit each role runs (``client`` runs none: it only needs the configuration)
ROLE_UNITS = {
    "zookeeper": "qjournal-zookeeper.service",
    "journalnode": "qjournal-journalnode.service",
    "namenode": "qjournal-namenode.service",
    "observer": "qjournal-observer.service",
    "zkfc": "qjournal-zkfc.service",
}


@dataclass(frozen=True)
class ServiceUnit:
    """The ``[Unit]`` and ``[Service]`` of a unit file, as far as running it goes.

    Attributes:
        name: the unit's file name.
        exec_start: ``ExecStart=`` split into argv.
        environment: every ``Environment=`` assignment, in order.
        type: ``Type=`` (``simple`` by default, as systemd's).
        after: the units named by ``After=``.
        user / group: ``User=`` / ``Group=`` (None: root).
        limit_nofile: ``LimitNOFILE=`` (soft and hard; None: the manager's default).
        restart / restart_sec: ``Restart=`` and ``RestartSec=`` as written.
        stdout / stderr: ``StandardOutput=`` / ``StandardError=`` as written.
        raw: every key of every section, each with its values in order.
    """

    name: str
    exec_start: tuple[str, ...]
    environment: dict[str, str]
    type: str = "simple"
    after: tuple[str, ...] = ()
    user: str | None = None
    group: str | None = None
    limit_nofile: int | None = None
    restart: str = "no"
    restart_sec: str = ""
    stdout: str = ""
    stderr: str = ""
    raw: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def log_file(self) -> str | None:
        """The file ``StandardOutput=append:FILE`` (or ``file:FILE``) names, else None."""
        for prefix in ("append:", "file:"):
            if self.stdout.startswith(prefix):
                return self.stdout[len(prefix):]
        return None


def _sections(text: str, name: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        n, line = i + 1, lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):  # continuation
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise ConfigError(f"{name}:{n}: expected [Section] or Key=Value, got {line!r}", path=name)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def parse_unit(text: str, name: str, drop_ins: tuple[str, ...] | list[str] = ()) -> ServiceUnit:
    """Parse a unit file's text (module docstring for the syntax covered), with its drop-ins.

    Args:
        text: the unit file.
        name: its name (for messages).
        drop_ins: the texts of its drop-in files (``<unit>.d/*.conf``, in name order), applied as
            systemd does: each assignment adds to the unit's, and an empty one (``ExecStart=``)
            clears what came before (how a drop-in replaces the command).

    Raises:
        ConfigError: malformed lines, no ``[Service]`` or ``ExecStart=``, more than one
            ``ExecStart=``, or syntax the parser does not model (named with the unit).
    """
    raw = _sections(text, name)
    for k, extra in enumerate(drop_ins):
        for section, keys in _sections(extra, f"{name}.d ({k + 1})").items():
            into = raw.setdefault(section, {})
            for key, values in keys.items():
                for v in values:
                    if v == "":
                        into[key] = []
                    else:
                        into.setdefault(key, []).append(v)
    svc = raw.get("Service")
    if svc is None:
        raise ConfigError(f"{name}: no [Service] section", path=name)

    def one(key: str, default: str = "") -> str:
        values = svc.get(key, [])
        if len(values) > 1:
            raise ConfigError(f"{name}: {key}= is given {len(values)} times", path=name)
        return values[0] if values else default

    exec_start = one("ExecStart")
    if not exec_start:
        raise ConfigError(f"{name}: no ExecStart=", path=name)
    if "%" in exec_start or exec_start[0] in "-@+!:":
        raise ConfigError(f"{name}: ExecStart={exec_start!r} uses specifiers or prefixes this parser does not "
                          "model", path=name)
    env: dict[str, str] = {}
    for assignment in svc.get("Environment", []):
        for word in shlex.split(assignment):
            k, sep, v = word.partition("=")
            if not sep:
                raise ConfigError(f"{name}: Environment={assignment!r}: expected NAME=VALUE", path=name)
            env[k] = v
    nofile = one("LimitNOFILE")
    if nofile and not nofile.isdigit():
        raise ConfigError(f"{name}: LimitNOFILE={nofile!r}: expected a number", path=name)
    after = tuple(w for v in raw.get("Unit", {}).get("After", []) for w in v.split())
    return ServiceUnit(name=name, exec_start=tuple(shlex.split(exec_start)), environment=env,
                       type=one("Type", "simple"), after=after, user=one("User") or None,
                       group=one("Group") or None, limit_nofile=int(nofile) if nofile else None,
                       restart=one("Restart", "no"), restart_sec=one("RestartSec"),
                       stdout=one("StandardOutput"), stderr=one("StandardError"), raw=raw)


def unit_names() -> list[str]:
    """Every unit shipped in the package, sorted."""
    files = importlib.resources.files("qjournal.deploy") / "systemd"
    return sorted(p.name for p in files.iterdir() if p.name.endswith(".service"))


def unit_text(name: str) -> str:
    """The text of a shipped unit.

    Raises:
        ConfigError: no such unit in the package.
    """
    if name not in unit_names():
        raise ConfigError(f"no unit {name!r} in the qjournal package; shipped: {', '.join(unit_names())}")
    return (importlib.resources.files("qjournal.deploy") / "systemd" / name).read_text()


def units_for_roles(roles: list[str] | tuple[str, ...]) -> list[str]:
    """The units a host with these roles runs, in the order of :data:`ROLE_UNITS` (which is the
    order of a first start)."""
    return [u for r, u in ROLE_UNITS.items() if r in roles]


def write_units(names: list[str], out_dir: str) -> list[str]:
    """Write the shipped units ``names`` into ``out_dir`` (atomically each). Returns the paths.

    Raises:
        ConfigError: an unknown unit. OSError: a file cannot be written.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for n in names:
        path = os.path.join(out_dir, n)
        atomic_write(path, unit_text(n).encode())
        paths.append(path)
    return paths

"""A runbook: the shell blocks of an operator's document, run on the test hosts as written.

Why: a deployment guide that no test runs drifts from the product one release at a time. The
blocks of ``docs/deploy.md`` that an operator types are marked, and the hosts tests run exactly
those blocks, on the hosts they name, in the order the tests choose; a test also checks that every
marked block is run by some test.

A marked block is a fenced block whose info string is ``sh id=NAME on=WHERE`` (and optionally
``serial``)::

    ```sh id=start-journalnodes on=role:journalnode
    systemctl start qjournal-journalnode
    ```

``on=`` names where it runs: ``build`` (the machine that builds the package, in the source
checkout), ``all`` (every host), ``role:ROLE`` (the hosts with that role) or host names separated
by commas; what the names mean is the caller's (:class:`Runbook` takes a resolver). A block runs on
its hosts in parallel, or one host after another with ``serial``.

How the lines run, and the only translations made (each because the test hosts have no systemd and
no ``qjournal`` account):

* ``systemctl start|stop|restart UNIT...``: the host's :class:`~qjournal.hosts.services.ServiceManager`
  (the unit file the host installed, as systemd would run it); ``systemctl daemon-reload``,
  ``enable`` and ``disable``: nothing (units are read at each start; nothing boots);
* a leading ``sudo -u qjournal``: dropped (the test's daemons run as root, so root is the
  NameNodes' superuser);
* every other run of lines: ``bash -euo pipefail -c`` inside the host (or on the build machine),
  with the environment the caller gives (e.g. ``WHEELHOUSE``).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Callable

from qjournal.hosts.netns import Host, HostsError
from qjournal.hosts.services import ServiceManager

__all__ = ["Block", "Step", "parse_runbook", "block_steps", "fenced_block", "Runbook"]

_FENCE = re.compile(r"^\s*```sh\s+(.*\S)\s*$")
_SUDO = re.compile(r"^(\s*)sudo -u qjournal\s+")


@dataclass(frozen=True)
class Block:
    """A marked block: its id, where it runs, whether host after host, its text, its first line."""

    id: str
    on: str
    serial: bool
    text: str
    line: int


@dataclass(frozen=True)
class Step:
    """One step of a block: ``systemctl`` words, or a shell script."""

    kind: str            # "systemctl" | "shell"
    text: str
    words: tuple[str, ...] = ()


def parse_runbook(text: str, source: str) -> dict[str, Block]:
    """The marked blocks of a Markdown document, by id, in document order.

    Raises:
        HostsError: a marked block without ``on=``, an unknown attribute, a repeated id, or an
            unclosed block (file and line named).
    """
    blocks: dict[str, Block] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        i += 1
        if not m or "id=" not in m.group(1):
            continue
        start = i
        attrs: dict[str, str] = {}
        for word in m.group(1).split():
            k, sep, v = word.partition("=")
            attrs[k] = v if sep else "yes"
        unknown = sorted(set(attrs) - {"id", "on", "serial"})
        if unknown or not attrs.get("on"):
            raise HostsError(f"{source}:{start}: a marked block needs id= and on= (and may say serial); "
                             f"got {m.group(1)!r}")
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise HostsError(f"{source}:{start}: block {attrs['id']} is not closed")
        i += 1
        if attrs["id"] in blocks:
            raise HostsError(f"{source}:{start}: block id {attrs['id']} is used twice")
        blocks[attrs["id"]] = Block(attrs["id"], attrs["on"], "serial" in attrs, "\n".join(body) + "\n", start)
    return blocks


def fenced_block(text: str, lang: str, block_id: str, source: str) -> str:
    """The body of the fenced block ```` ```LANG id=ID ```` (e.g. the description in ``toml``).

    Raises:
        HostsError: no such block.
    """
    lines = text.splitlines()
    head = re.compile(rf"^\s*```{re.escape(lang)}\s+id={re.escape(block_id)}\s*$")
    for i, line in enumerate(lines):
        if head.match(line):
            body = []
            for b in lines[i + 1:]:
                if b.strip() == "```":
                    return "\n".join(body) + "\n"
                body.append(b)
    raise HostsError(f"{source}: no ```{lang} id={block_id} block")


def block_steps(block: Block) -> list[Step]:
    """The steps of a block (module docstring: ``systemctl`` lines apart, shell runs together)."""
    steps: list[Step] = []
    shell: list[str] = []
    logical: list[str] = []
    for raw in block.text.splitlines():   # join continuation lines first
        if logical and logical[-1].endswith("\\"):
            logical[-1] = logical[-1][:-1] + " " + raw.strip()
        else:
            logical.append(raw)
    for line in logical:
        line = _SUDO.sub(r"\1", line)
        words = shlex.split(line, comments=True) if line.strip() else []
        if words and words[0] == "systemctl":
            if shell:
                steps.append(Step("shell", "\n".join(shell) + "\n"))
                shell = []
            steps.append(Step("systemctl", line.strip(), tuple(words[1:])))
        else:
            shell.append(line)
    if any(s.strip() and not s.strip().startswith("#") for s in shell):
        steps.append(Step("shell", "\n".join(shell) + "\n"))
    return steps


class Runbook:
    """The marked blocks of one document, run on a network's hosts.

    Args:
        blocks: from :func:`parse_runbook`.
        hosts: the hosts by name.
        services: each host's service manager, by host name.
        resolve: ``on=`` value (other than ``build``) -> host names.
        build_dir: where ``on=build`` blocks run (the source checkout).
        env: environment for every block (e.g. ``WHEELHOUSE``).
        log: called with a line for every step run (progress, and the report's trace).
    """

    def __init__(self, blocks: dict[str, Block], hosts: dict[str, Host], services: dict[str, ServiceManager],
                 resolve: Callable[[str], list[str]], build_dir: str, env: dict[str, str] | None = None,
                 log: Callable[[str], None] = lambda s: None) -> None:
        self.blocks = blocks
        self.hosts = hosts
        self.services = services
        self.resolve = resolve
        self.build_dir = build_dir
        self.env = dict(env or {})
        self.log = log
        #: the ids run so far, in order
        self.ran: list[str] = []

    def run(self, block_id: str, hosts: list[str] | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
        """Run block ``block_id`` (on ``hosts`` instead of its ``on=`` when given).

        Returns:
            Each host's (or ``build``'s) shell output.

        Raises:
            HostsError: no such block, or a step failed (host, line and output named).
        """
        try:
            block = self.blocks[block_id]
        except KeyError:
            raise HostsError(f"no block {block_id!r} in the runbook; blocks: {', '.join(self.blocks)}") from None
        full_env = {**self.env, **(env or {})}
        self.ran.append(block_id)
        if block.on == "build":
            return {"build": self._steps_on(None, block, full_env)}
        names = hosts if hosts is not None else self.resolve(block.on)
        if block.serial or len(names) == 1:
            return {n: self._steps_on(n, block, full_env) for n in names}
        with concurrent.futures.ThreadPoolExecutor(len(names)) as ex:
            futures = {n: ex.submit(self._steps_on, n, block, full_env) for n in names}
            return {n: f.result() for n, f in futures.items()}

    def _steps_on(self, host: str | None, block: Block, env: dict[str, str]) -> str:
        out = []
        where = host or "build"
        for step in block_steps(block):
            self.log(f"[{block.id} @ {where}] {step.text.strip().splitlines()[0] if step.text.strip() else ''}")
            if step.kind == "systemctl":
                if host is None:
                    raise HostsError(f"block {block.id}: systemctl on the build machine")
                self._systemctl(host, block, step)
                continue
            argv = ["bash", "-euo", "pipefail", "-c", step.text]
            if host is None:
                r = subprocess.run(argv, cwd=self.build_dir, capture_output=True, text=True, timeout=600,
                                   env={**os.environ, **env}, stdin=subprocess.DEVNULL)
                if r.returncode != 0:
                    raise HostsError(f"block {block.id} (line {block.line}) failed on the build machine with status "
                                     f"{r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}")
                out.append(r.stdout)
            else:
                try:
                    out.append(self.hosts[host].run(argv, env=env, timeout_s=600).stdout)
                except HostsError as e:
                    raise HostsError(f"block {block.id} (line {block.line}): {e}") from e
        return "".join(out)

    def _systemctl(self, host: str, block: Block, step: Step) -> None:
        action, *units = step.words or ("",)
        mgr = self.services[host]
        if action in ("daemon-reload", "enable", "disable"):
            return
        fn = {"start": mgr.start, "stop": mgr.stop, "restart": mgr.restart}.get(action)
        if fn is None or not units:
            raise HostsError(f"block {block.id} (line {block.line}): `{step.text}`: the hosts run systemctl "
                             "start|stop|restart UNIT..., daemon-reload, enable and disable")
        for u in units:
            fn(u if "." in u else f"{u}.service")  # systemctl's own default suffix

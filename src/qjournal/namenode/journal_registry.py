"""JournalManager URI registry: ``open_journal(uri, conf)`` picks a back end by URI scheme.

Why: the NameNode's edit directories are configured as URIs
(``dfs.namenode.edits.dir``, ``dfs.namenode.shared.edits.dir``): ``file:///...``
for a directory, ``qjournal://h1:8485;h2:8485;h3:8485/<jid>`` for a JournalNode
quorum, and anything a third party provides (BookKeeper in HDFS's day). The
NameNode asks this registry rather than naming back ends itself. It lives with
the NameNode, its user, above both built-in back ends (the HDFS-1580
``journalmanager`` and the quorum ``client``), so it imports them plainly: no
import by name runs back up the layers.

Resolution order for a scheme (first hit wins):

1. factories registered in this process with :func:`register_scheme` (tests, embedders);
2. the configuration key ``dfs.namenode.edits.journal-plugin.<scheme>`` naming
   ``module:callable`` (Hadoop's journal-plugin key);
3. the built-ins ``file`` (:class:`~qjournal.journalmanager.file.FileJournal`) and
   ``qjournal`` (``qjournal.client.qjm.QuorumJournalManager``);
4. entry points of the group ``qjournal.journals`` (value: a callable
   ``(uri, conf) -> JournalManager``).

A bare path (no scheme) is taken as ``file://``, as Hadoop does for
``dfs.namenode.name.dir``.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any, Callable
from urllib.parse import urlparse

from qjournal.client.qjm import QuorumJournalManager
from qjournal.errors import JournalError, UnknownSchemeError
from qjournal.journalmanager.base import JournalManager
from qjournal.journalmanager.file import FileJournal
from qjournal.journalmanager.journalset import JournalSet

JournalFactory = Callable[[str, Any], JournalManager]
#: ``(uri, conf) -> JournalManager``: how a process opens a journal by URI (:func:`open_journal`, or the
#: simulator's, which puts the quorum client on its memory network)
JournalOpener = Callable[[str, Any], JournalManager]
ENTRY_POINT_GROUP = "qjournal.journals"

_REGISTERED: dict[str, JournalFactory] = {}


def register_scheme(scheme: str, factory: JournalFactory) -> None:
    """Register (or replace) the factory of a URI scheme in this process.

    Args:
        scheme: lower-case URI scheme, e.g. ``mem``.
        factory: ``(uri, conf) -> JournalManager``.
    """
    _REGISTERED[scheme.lower()] = factory


def unregister_scheme(scheme: str) -> None:
    """Forget a factory registered with :func:`register_scheme` (no-op when absent)."""
    _REGISTERED.pop(scheme.lower(), None)


def _file_factory(uri: str, conf: Any) -> JournalManager:
    return FileJournal.from_uri(uri, conf)


def _qjournal_factory(uri: str, conf: Any) -> JournalManager:
    return QuorumJournalManager.from_uri(uri, conf)


_BUILTIN: dict[str, JournalFactory] = {"file": _file_factory, "qjournal": _qjournal_factory}


def _load_callable(spec: str, where: str) -> JournalFactory:
    module, sep, attr = spec.partition(":")  # a third party's plugin, named by the configuration
    if not sep or not module or not attr:
        raise JournalError(f"{where}: expected 'module:callable', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise JournalError(f"{where}: cannot load journal factory {spec!r}: {e}") from None
    return obj


def _entry_point(scheme: str) -> JournalFactory | None:
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # broken distribution metadata must not hide the built-ins
        return None
    for ep in sorted(eps, key=lambda e: (e.name, e.value)):
        if ep.name == scheme:
            try:
                return ep.load()
            except Exception as e:
                raise JournalError(f"entry point {ep.name} = {ep.value} of group {ENTRY_POINT_GROUP} "
                                   f"cannot be loaded: {e}") from None
    return None


def known_schemes() -> list[str]:
    """Schemes available without configuration: registered, built-in and entry points (sorted)."""
    names = set(_REGISTERED) | set(_BUILTIN)
    try:
        names |= {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:
        pass
    return sorted(names)


def factory_for(scheme: str, conf: Any = None) -> JournalFactory:
    """The factory of a scheme, following the resolution order of the module docstring.

    Raises:
        UnknownSchemeError: no back end for the scheme (the known ones are listed).
        JournalError: a configured or entry-point factory cannot be loaded.
    """
    scheme = scheme.lower()
    if scheme in _REGISTERED:
        return _REGISTERED[scheme]
    if conf is not None:
        key = f"dfs.namenode.edits.journal-plugin.{scheme}"
        spec = conf.get(key)
        if spec:
            return _load_callable(spec, key)
    if scheme in _BUILTIN:
        return _BUILTIN[scheme]
    fac = _entry_point(scheme)
    if fac is not None:
        return fac
    raise UnknownSchemeError(
        f"no journal back end for URI scheme {scheme!r} (known: {', '.join(known_schemes())}; "
        f"add one with dfs.namenode.edits.journal-plugin.{scheme} or the {ENTRY_POINT_GROUP} entry point "
        f"group)", scheme=scheme)


def open_journal(uri: str, conf: Any = None) -> JournalManager:
    """The JournalManager for a URI.

    Args:
        uri: ``file:///path``, ``qjournal://h1:p1;h2:p2/jid``, a registered scheme, or a bare path.
        conf: a :class:`~qjournal.config.Configuration` passed to the factory (may be None).

    Returns:
        The journal (not yet formatted or recovered).

    Raises:
        UnknownSchemeError: no back end for the scheme.
        JournalError / InvalidRequestError: the back end refused the URI.
    """
    uri = uri.strip()
    scheme = urlparse(uri).scheme
    if not scheme:
        if not uri.startswith("/"):
            raise UnknownSchemeError(f"{uri!r}: not a URI and not an absolute path", uri=uri)
        uri = "file://" + uri
        scheme = "file"
    journal = factory_for(scheme, conf)(uri, conf)
    if not isinstance(journal, JournalManager):
        raise JournalError(f"{uri}: the {scheme!r} factory returned {type(journal).__name__}, not a JournalManager",
                           uri=uri)
    return journal


def open_journal_set(uris: list[str], conf: Any = None, required: list[str] | None = None):
    """A :class:`~qjournal.journalmanager.journalset.JournalSet` over several URIs.

    Args:
        uris: journal URIs in read-preference order (local first).
        conf: configuration for the factories.
        required: URIs whose failure fails the set (default:
            ``dfs.namenode.edits.dir.required`` from ``conf``).

    Raises:
        as :func:`open_journal`.
    """

    if required is None:
        required = conf.get_list("dfs.namenode.edits.dir.required") if conf is not None else []
    journals = []
    for u in uris:
        j = open_journal(u, conf)
        if u in required:
            j.required = True
        journals.append(j)
    return JournalSet(journals)

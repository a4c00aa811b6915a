"""Every configuration key qjournal knows, with its type, unit and default.

Why one table: an operator's typo (``dfs.qjournal.write-txns.timout.ms``) must
fail at start-up with the key and file named, not be silently ignored. That is
only possible if the set of valid keys is known. Each role owns one section
below and adds its keys there with :func:`define`; nothing else in the code
base hard-codes a default.

Names and defaults follow Hadoop (``hdfs-default.xml``, ``core-default.xml``)
wherever Hadoop has the key; qjournal-only keys use the ``qjournal.`` prefix.

Kinds (see :class:`Key`):

* ``str``, ``int``, ``float``, ``bool`` (``true``/``false``, any case),
* ``duration`` with a ``unit`` (``ms`` or ``s``): a bare number is in the key's
  unit (Hadoop's ``getTimeDuration``), or a number with a suffix
  ``ns us ms s m h d``,
* ``bytes``: an integer with an optional binary suffix ``k m g t``,
* ``list``: comma separated, blanks trimmed, empty items dropped,
* ``address``: ``host:port``.

Templates: a name containing ``<ns>``, ``<nn>`` or another ``<part>`` matches
any concrete key with one dot-free word in that place
(``dfs.namenode.rpc-address.<ns>.<nn>`` matches
``dfs.namenode.rpc-address.mycluster.nn1``). Build concrete names with
:func:`expand`.

Invariants:

1. A key name is defined once (``define`` refuses a duplicate).
2. Every default parses under its own kind (checked when the module loads,
   so a broken default fails every test, not one run in production).
3. No silent keys: every key here is read by the code that it configures
   (``tests/foundation/test_no_silent_keys.py`` walks the table). A Hadoop key
   whose concept qjournal does not have is not defined but listed in
   :data:`UNSUPPORTED` with the reason, so an operator's ``hdfs-site.xml``
   that sets it fails at start-up with that reason instead of being obeyed
   in name only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("str", "int", "float", "bool", "duration", "bytes", "list", "address")


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key.

    Attributes:
        name: the Hadoop-style name, possibly a template with ``<part>`` words.
        default: the default as a string (as it would appear in XML), or None
            for "unset".
        kind: one of :data:`KINDS`.
        doc: one line saying what the key controls.
        unit: for ``duration`` keys, the unit of a bare number (``ms`` or ``s``).
    """

    name: str
    default: str | None
    kind: str
    doc: str
    unit: str = ""

    @property
    def is_template(self) -> bool:
        return "<" in self.name


#: name -> Key, in definition order (sections below).
KEYS: dict[str, Key] = {}
_TEMPLATES: list[tuple[re.Pattern[str], Key]] = []
_PART = re.compile(r"<[a-z_]+>")


def define(name: str, default: object, kind: str = "str", doc: str = "", unit: str = "") -> Key:
    """Add a key to the table (used by each role's section below).

    Args:
        name: Hadoop-style key name; ``<part>`` words make it a template.
        default: default value (converted with ``str``; bools become
            ``true``/``false``); None means unset.
        kind: one of :data:`KINDS`.
        doc: one line of documentation.
        unit: ``ms`` or ``s`` for ``duration`` keys.

    Returns:
        The new :class:`Key`.

    Raises:
        ValueError: duplicate name, unknown kind, or a duration without unit.
    """
    if name in KEYS:
        raise ValueError(f"configuration key {name!r} is defined twice")
    if kind not in KINDS:
        raise ValueError(f"configuration key {name!r}: unknown kind {kind!r}")
    if kind == "duration" and unit not in ("ms", "s"):
        raise ValueError(f"configuration key {name!r}: a duration needs unit 'ms' or 's'")
    if isinstance(default, bool):
        default = "true" if default else "false"
    key = Key(name, None if default is None else str(default), kind, doc, unit)
    KEYS[name] = key
    if key.is_template:
        pattern = re.escape(name)
        for part in _PART.findall(name):
            pattern = pattern.replace(re.escape(part), r"[^.]+")
        _TEMPLATES.append((re.compile(f"^{pattern}$"), key))
    return key


#: Hadoop keys qjournal refuses, name -> why (invariant 3). Setting one is a
#: ConfigError that names the key and gives the reason.
UNSUPPORTED: dict[str, str] = {
    "dfs.journalnode.handler.count":
        "JournalNode RPC handlers are asyncio tasks, not a thread pool; the per-connection bound is "
        "qjournal.rpc.server.max-queued-requests",
    "dfs.qjournal.parallel-read.num-threads":
        "the quorum reader has no read thread pool: it asks every JournalNode at once (one call per "
        "node) and streams one segment at a time",
    "dfs.ha.zkfc.nn.http.timeout.ms":
        "the ZKFC makes no HTTP calls to its NameNode (health checks are RPC: ha.health-monitor.rpc-timeout.ms)",
}


def unsupported(name: str) -> str | None:
    """Why ``name`` is refused, or None when it is not an unsupported key."""
    return UNSUPPORTED.get(name)


def lookup(name: str) -> Key | None:
    """The :class:`Key` a concrete name belongs to (exact match first, then templates)."""
    key = KEYS.get(name)
    if key is not None:
        return key
    for pattern, tkey in _TEMPLATES:
        if pattern.match(name):
            return tkey
    return None


def expand(template: str, *parts: str) -> str:
    """Fill a template's ``<part>`` words in order.

    Example: ``expand("dfs.namenode.rpc-address.<ns>.<nn>", "ns1", "nn1")``.

    Raises:
        ValueError: wrong number of parts, or a part that is empty or contains a dot.
    """
    holes = _PART.findall(template)
    if len(holes) != len(parts):
        raise ValueError(f"{template}: needs {len(holes)} parts, got {len(parts)}")
    out = template
    for hole, part in zip(holes, parts):
        if not part or "." in part:
            raise ValueError(f"{template}: part {hole} must be a non-empty word without dots, got {part!r}")
        out = out.replace(hole, part, 1)
    return out


MiB = 1024 * 1024

# --- common (core-site.xml) ------------------------------------------------------
define("hadoop.tmp.dir", "/tmp/qjournal-${user.name}", doc="base for other temporary directories")
define("fs.defaultFS", "file:///", doc="default file system URI (accepted for Hadoop compatibility)")
define("ipc.maximum.data.length", 64 * MiB, "bytes",
       "largest RPC frame accepted on the wire (transport max frame size)")
define("ipc.client.connect.timeout", 20000, "duration", "RPC client TCP connect + TLS handshake timeout",
       unit="ms")
define("qjournal.rpc.server.max-queued-requests", 1024, "int",
       "requests queued or running per RPC connection before the server stops reading it (back-pressure)")
define("qjournal.rpc.tls.enabled", False, "bool", "mutual TLS on every RPC connection (server and client)")
define("qjournal.rpc.tls.cert.file", None, "str", "PEM certificate of this process (RPC TLS)")
define("qjournal.rpc.tls.key.file", None, "str", "PEM private key of this process (RPC TLS)")
define("qjournal.rpc.tls.ca.file", None, "str", "PEM CA bundle that signs every peer certificate (RPC TLS)")
define("dfs.http.policy", "HTTP_ONLY", doc="HTTP_ONLY, or HTTPS_ONLY: every daemon HTTP server (and segment "
       "download) uses mutual TLS with the qjournal.rpc.tls.* certificate, key and CA")
define("hadoop.http.staticuser.user", "dr.who",
       doc="the user of a WebHDFS request without user.name (empty: such a request is refused with 401)")
define("hadoop.user.group.static.mapping.overrides", "dr.who=;",
       doc="groups of named users that replace the OS groups, 'user1=g1,g2;user2=;' (NameNode group mapping)")
define("hadoop.security.groups.cache.secs", 300, "duration",
       "how long a daemon keeps a user's groups before asking the OS again", unit="s")

# --- security: identity, group mapping, service-level authorization (docs/security.md) -----
define("qjournal.security.group.mapping.file", None, "str",
       "file of 'user=group1,group2' lines giving listed users exactly those groups (after the static "
       "overrides, before the OS); read again by dfsadmin -refreshUserToGroupsMappings")
define("hadoop.security.auth_to_local", "DEFAULT",
       doc="rules mapping a TLS certificate's principal (subject CN) to a short user name: "
           "RULE:[n:format](match)s/pattern/replacement/g/L and DEFAULT, Hadoop's syntax")
define("hadoop.security.authorization", False, "bool",
       "service-level authorization: every RPC and HTTP endpoint checks its security.*.acl for the "
       "caller's certificate identity (needs qjournal.rpc.tls.enabled and dfs.http.policy=HTTPS_ONLY)")
define("security.client.protocol.acl", "*",
       doc="ACL ('users groups', '*') of ClientProtocol: namespace calls, dfsadmin's and WebHDFS")
define("security.qjournal.service.protocol.acl", "*",
       doc="ACL of QJournalProtocol on the JournalNodes: the writer's and recovery calls and the "
           "readers' (the NameNodes), and /getJournal")
define("security.interqjournal.service.protocol.acl", "*",
       doc="ACL of InterQJournalProtocol: JournalNodes syncing from each other (get_edit_log_manifest, "
           "/getJournal)")
define("security.ha.service.protocol.acl", "*",
       doc="ACL of HAServiceProtocol on the NameNodes (transition_to_active, monitor_health, ...)")
define("security.zkfc.protocol.acl", "*", doc="ACL of ZKFCProtocol (cede_active, graceful_failover, status)")
define("security.namenode.protocol.acl", "*",
       doc="ACL of NamenodeProtocol: NameNode to NameNode (image upload and download, roll, stats)")
define("security.refresh.policy.protocol.acl", "*",
       doc="ACL of refresh_service_acl (dfsadmin -refreshServiceAcl) on every daemon")
define("security.refresh.user.mappings.protocol.acl", "*",
       doc="ACL of refresh_user_to_groups_mappings (dfsadmin -refreshUserToGroupsMappings) on every daemon")
define("hadoop.security.instrumentation.requires.admin", False, "bool",
       "with authorization on, /jmx, /metrics and the status pages need dfs.cluster.administrators")
define("dfs.cluster.administrators", "",
       doc="ACL of the HTTP admin endpoints (/jmx, /metrics, status pages) when "
           "hadoop.security.instrumentation.requires.admin is true")
define("qjournal.log.level", "INFO", doc="log level of daemons (TRACE, DEBUG, INFO, WARNING, ERROR)")
define("qjournal.log.json", True, "bool", "structured JSON-lines logs on stderr (false: plain text)")
define("qjournal.log.levels", "", "list",
       "levels of single loggers, logger=LEVEL (log4j's log4j.logger.<name>): qjournal.ipc=TRACE writes one line per "
       "RPC call and answer (method, peer, epoch, txids, bytes, latency) on clients and servers; off by default")
define("jvm.pause.info-threshold.ms", 1000, "duration",
       "a daemon logs an event-loop stall or garbage-collector pause at least this long (util/pause_monitor.py)",
       unit="ms")
define("jvm.pause.warn-threshold.ms", 10000, "duration",
       "... and logs it as a warning from this long", unit="ms")
define("qjournal.event-loop", "auto",
       doc="event loop of the daemons (journalnode, namenode, zkfc): asyncio (the standard library's), uvloop "
           "(pip install 'qjournal[fast]'; about a tenth less CPU per call) or auto (uvloop when installed)")

# --- journal interface / FileJournal (foundation) -----------------------------------
define("dfs.namenode.max.op.size", 50 * MiB, "bytes",
       "largest edit record body; bigger records are refused on write and treated as corrupt on read")
define("qjournal.file-journal.lock.enabled", True, "bool",
       "take in_use.lock on a FileJournal directory (single-writer rule)")
define("qjournal.file-journal.preallocate.bytes", 1 * MiB, "bytes",
       "a FileJournal's open segment grows this much at a time (posix_fallocate; the tail reads as padding "
       "and is cut off when the segment is finalized), so the fdatasync after a batch need not make a new "
       "file size durable (Hadoop's EditLogFileOutputStream preallocates 1 MiB); 0: never")
define("dfs.namenode.edits.journal-plugin.<scheme>", None,
       doc="import path 'module:callable' of a journal factory (uri, conf) for a URI scheme")

# --- NameNode ----------------------------------------------------------------------
define("dfs.nameservices", "", "list", "logical names of the nameservices")
define("dfs.namenode.name.dir", "file://${hadoop.tmp.dir}/dfs/name", "list",
       "directories holding the fsimage")
define("dfs.namenode.edits.dir", "${dfs.namenode.name.dir}", "list",
       "local journals of the NameNode (URIs or paths)")
define("dfs.namenode.edits.dir.required", "", "list",
       "journals whose failure fails the NameNode (a JournalSet 'required' journal)")
define("dfs.namenode.shared.edits.dir", None, "str",
       "the shared journal of an HA pair, e.g. qjournal://h1:8485;h2:8485;h3:8485/mycluster")
define("dfs.namenode.shared.edits.dir.<ns>", None, "str",
       "the shared journal of nameservice <ns> (JournalNodes serving several nameservices read every one)")
define("dfs.namenode.rpc-address", None, "address", "NameNode RPC address (non-HA)")
define("dfs.namenode.http-address", "0.0.0.0:9870", "address", "NameNode HTTP address (non-HA)")
define("dfs.namenode.rpc-address.<ns>.<nn>", None, "address", "RPC address of NameNode <nn> of <ns>")
define("dfs.namenode.http-address.<ns>.<nn>", None, "address", "HTTP address of NameNode <nn> of <ns>")
define("dfs.namenode.https-address", "0.0.0.0:9871", "address", "NameNode HTTPS address (non-HA, HTTPS_ONLY)")
define("dfs.namenode.https-address.<ns>.<nn>", None, "address",
       "HTTPS address of NameNode <nn> of <ns> (dfs.http.policy = HTTPS_ONLY)")
define("dfs.namenode.http-bind-host", None, "str", "overrides the host of the http(s)-address when binding")
define("dfs.namenode.checkpoint.txns", 1000000, "int", "checkpoint after this many uncheckpointed txns")
define("dfs.namenode.checkpoint.period", 3600, "duration", "checkpoint at least this often", unit="s")
define("dfs.namenode.num.checkpoints.retained", 2, "int", "fsimages kept")
define("dfs.namenode.num.extra.edits.retained", 1000000, "int",
       "txns kept beyond the oldest retained image")
define("dfs.namenode.checkpoint.check.period", 60, "duration",
       "how often the checkpointer checks whether a checkpoint is due", unit="s")
define("dfs.namenode.edit.log.autoroll.multiplier.threshold", 0.5, "float",
       "roll the edit log once a segment holds this times dfs.namenode.checkpoint.txns txns")
define("dfs.permissions.enabled", True, "bool", "check owner/group/other permission bits")
define("dfs.permissions.superusergroup", "supergroup", doc="members of this group are superusers")
define("dfs.namenode.resource.du.reserved", 100 * MiB, "bytes",
       "monitor-health fails when a name or edits directory has less free space than this")
define("dfs.ls.limit", 1000, "int", "most entries of one WebHDFS LISTSTATUS_BATCH answer (one getListing batch)")
define("dfs.ha.allow.stale.reads", False, "bool", "the standby NameNode serves reads")
define("dfs.ha.nn.not-become-active-in-safemode", False, "bool",
       "a NameNode in safe mode refuses to become active or observer and reports itself unhealthy "
       "to its ZKFC (HDFS-14201, HDFS-16547)")
define("dfs.namenode.missing.checkpoint.periods.before.shutdown", 3, "int",
       "dfsadmin -saveNamespace -beforeShutdown saves only when the newest image is older than this many "
       "dfs.namenode.checkpoint.period, or this many dfs.namenode.checkpoint.txns behind")
define("dfs.namenode.observer.read.wait.ms", 1000, "duration",
       "how long an observer holds a read whose client state id it has not applied yet before "
       "refusing it with the retriable ObserverRetryOnActiveError (0 = refuse at once)", unit="ms")
define("dfs.namenode.retrycache.expirytime.millis", 600000, "duration",
       "how long the retry cache keeps an answer", unit="ms")
define("qjournal.namenode.retrycache.max-entries", 1000000, "int", "retry cache size bound")
define("qjournal.namenode.web.probe.timeout.ms", 1000, "duration",
       "the overview page's bound on asking each other NameNode and each JournalNode for its state", unit="ms")
define("qjournal.namenode.web.probe.cache.ms", 2000, "duration",
       "the overview page reuses its peers' answers this long (one probe per period however many viewers)",
       unit="ms")
define("qjournal.namenode.superuser", "${user.name}", doc="the NameNode's user (the HDFS superuser)")
define("qjournal.namenode.rpc-bind-host", None, "str", "overrides the host of the rpc-address when binding")
define("qjournal.client.rpc-timeout.ms", 60000, "duration", "DFS client per-call deadline", unit="ms")
define("qjournal.namenode.checkpoint.upload.timeout.ms", 60000, "duration",
       "standby -> active checkpoint image upload RPC timeout", unit="ms")

# --- JournalNode -------------------------------------------------------------------
define("dfs.journalnode.edits.dir", "/tmp/hadoop/dfs/journalnode/", "str",
       "directory holding one sub-directory per journal id")
define("dfs.journalnode.edits.dir.<ns>", None, "str", "per-nameservice journal directory")
define("dfs.journalnode.rpc-address", "0.0.0.0:8485", "address", "JournalNode RPC address")
define("dfs.journalnode.rpc-bind-host", None, "str", "overrides the host of rpc-address when binding")
define("dfs.journalnode.http-address", "0.0.0.0:8480", "address", "JournalNode HTTP address")
define("dfs.journalnode.https-address", "0.0.0.0:8481", "address", "JournalNode HTTPS address")
define("dfs.journalnode.http-bind-host", None, "str", "overrides the host of http-address when binding")
define("dfs.journalnode.enable.sync", True, "bool", "JournalNodeSyncer copies missing finalized segments")
define("dfs.journalnode.sync.interval", 120000, "duration", "JournalNodeSyncer period", unit="ms")
define("dfs.journalnode.enable.sync.format", False, "bool", "syncer formats a wiped journal (HDFS-16690)")
define("dfs.edit.log.transfer.timeout", 30000, "duration", "HTTP segment transfer timeout", unit="ms")
define("dfs.edit.log.transfer.bandwidthPerSec", 0, "bytes", "segment transfer throttle (0 = none)")
define("qjournal.segment-transfer.chunk.bytes", 1 * MiB, "bytes",
       "largest piece of a segment body a download holds in memory besides one record (quorum reader, "
       "accept-recovery, syncer, the pipeline's executor fetch); memory use is independent of the segment size")
define("dfs.journalnode.edit-cache-size.bytes", 32 * MiB, "bytes",
       "per journal: recent durable edits kept in memory for get_journaled_edits (RPC tailing); "
       "the cache exists when dfs.ha.tail-edits.in-progress is true; 0 disables it")
define("qjournal.journalnode.max-journals", 1024, "int",
       "journal ids one JournalNode serves (created lazily; a limit on everything)")
define("qjournal.journalnode.slow-sync.warn.ms", 1000, "duration",
       "log a WARN when one batch fsync takes longer (Hadoop: 1 s)", unit="ms")
define("qjournal.journalnode.inline-write.max.ms", 20, "duration",
       "a journal's journal and heartbeat calls run on the event loop, fsync included, while each takes "
       "at most this long and no other journal is being written (one thread hop fewer per commit); a "
       "slower call moves them to the journal's thread for 30 s and until fast again; 0: always the thread",
       unit="ms")
define("qjournal.journalnode.recovery-download.max.bytes", 2 * 1024 * MiB, "bytes",
       "largest segment accept-recovery downloads from a peer")
define("qjournal.journalnode.preallocate.bytes", 1 * MiB, "bytes",
       "segment files grow this much at a time (posix_fallocate; the tail reads as padding), so the fsync "
       "after a batch need not make a new file size durable (Hadoop preallocates 1 MiB); 0: never")
define("qjournal.journalnode.fsync", True, "bool",
       "fsync segments and metadata (false only for tests, as Hadoop's skip-fsync-for-testing)")

# --- QuorumJournalManager client (reference §4.7) ------------------------------------
define("dfs.qjournal.start-segment.timeout.ms", 20000, "duration", "startLogSegment quorum", unit="ms")
define("dfs.qjournal.prepare-recovery.timeout.ms", 120000, "duration", "prepareRecovery quorum", unit="ms")
define("dfs.qjournal.accept-recovery.timeout.ms", 120000, "duration", "acceptRecovery quorum", unit="ms")
define("dfs.qjournal.finalize-segment.timeout.ms", 120000, "duration", "finalizeLogSegment quorum", unit="ms")
define("dfs.qjournal.select-input-streams.timeout.ms", 20000, "duration",
       "getEditLogManifest quorum when selecting input streams", unit="ms")
define("dfs.qjournal.get-journal-state.timeout.ms", 120000, "duration", "getJournalState quorum", unit="ms")
define("dfs.qjournal.new-epoch.timeout.ms", 120000, "duration", "newEpoch quorum", unit="ms")
define("dfs.qjournal.write-txns.timeout.ms", 20000, "duration", "every journal (sendEdits) quorum", unit="ms")
define("dfs.qjm.operations.timeout", 60000, "duration",
       "format, hasSomeData and other whole-set operations", unit="ms")
define("dfs.qjournal.queued-edits.limit.mb", 10, "int", "per-JournalNode client queue limit in MiB")
define("dfs.qjournal.http.open.timeout.ms", 60000, "duration", "HTTP segment fetch connect timeout", unit="ms")
define("dfs.qjournal.http.read.timeout.ms", 60000, "duration", "HTTP segment fetch read timeout", unit="ms")
define("qjournal.qjm.out-of-sync.heartbeat.interval.ms", 1000, "duration",
       "heartbeat interval to a JournalNode that is out of sync until the next roll", unit="ms")
define("qjournal.qjm.coalesce.max.bytes", 8 * MiB, "bytes",
       "largest journal call made by coalescing the queued batches of a lagging JournalNode")
define("qjournal.qjm.catch-up.buffer.bytes", 16 * MiB, "bytes",
       "recent batches of the open segment each logger keeps, to bring a node that fell out of sync back "
       "inside the segment (0: it waits for the next segment, as Hadoop)")
define("qjournal.qjm.committed-txid.notify.delay.ms", 5, "duration",
       "after a quorum acknowledged a batch and no later write followed within this delay, the "
       "writer sends the committed txid to the JournalNodes (a heartbeat), so tailers reading "
       "their edit caches see the batch as committed", unit="ms")

# --- HA: NameNode pair, tailing, fencing (reference §4.7, §5.1, §7.3; seed 004) --------
define("dfs.ha.namenodes.<ns>", None, "list", "NameNode ids of nameservice <ns>")
define("dfs.ha.namenode.id", None, "str", "id of this NameNode within its nameservice")
define("dfs.ha.automatic-failover.enabled", False, "bool", "ZKFC-driven failover")
define("dfs.ha.automatic-failover.enabled.<ns>", None, "bool", "per-nameservice automatic failover")
define("dfs.ha.fencing.methods", "", "str", "fencing methods tried in order, one per line: shell(cmd), pidfence(dir), sshfence")
define("dfs.ha.fencing.ssh.connect-timeout", 30000, "duration", "sshfence connect timeout", unit="ms")
define("dfs.ha.fencing.ssh.private-key-files", "", "list", "sshfence keys")
define("qjournal.ha.fencing.ssh.known-hosts-files", "", "list",
       "sshfence: known_hosts files that hold the NameNode hosts' keys (empty: ssh's own, ~/.ssh/known_hosts "
       "and /etc/ssh/ssh_known_hosts); an unknown or changed host key fails the method")
define("qjournal.ha.fencing.ssh.strict-host-key-checking", True, "bool",
       "sshfence checks the target's host key against the known_hosts files (false: accept any key, as "
       "Hadoop's JSch-based sshfence does; a man in the middle can then fake a successful fence)")
define("dfs.ha.tail-edits.period", 60, "duration", "standby tailer period", unit="s")
define("dfs.ha.tail-edits.period.backoff-max", 0, "duration",
       "after rounds that found no edit the tailer waits twice as long each time, up to this "
       "(0 or not above the period: always the period)", unit="s")
define("dfs.ha.tail-edits.in-progress", True, "bool",
       "tail the in-progress segment: committed edits over RPC from the JournalNodes' edit caches "
       "(HDFS-13150), else streamed from the segments; quorum journals only")
define("dfs.ha.tail-edits.qjm.rpc.max-txns", 5000, "int", "max txns per get_journaled_edits answer")
define("dfs.ha.log-roll.period", 120, "duration",
       "a standby that applied edits since its last request asks the active to roll its edit log this often "
       "(HDFS's EditLogTailer trigger; 0 = never; the active has no timer of its own)", unit="s")
define("dfs.ha.tail-edits.rolledits.timeout", 60, "duration",
       "deadline of the standby's roll_edit_log call to the active", unit="s")
define("dfs.ha.zkfc.port", 8019, "int", "ZKFC RPC port")
define("dfs.client.failover.proxy.provider.<ns>", None, "str",
       "client failover proxy of <ns>: ...ConfiguredFailoverProxyProvider (default: every call to the "
       "active) or org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider (reads to observers)")
define("dfs.client.failover.observer.auto-msync-period.<ns>", None, "duration",
       "ObserverReadProxyProvider: msync before a read once this long passed since the last msync "
       "(0 = before every read; unset = only before the first call)", unit="ms")
define("dfs.client.failover.observer.probe.retry.period", 600, "duration",
       "ObserverReadProxyProvider: after a probe of the NameNodes' states found no observer, send reads "
       "to the active for this long before probing again", unit="s")
define("dfs.client.failover.max.attempts", 15, "int", "client failover attempts")
define("dfs.client.failover.sleep.base.millis", 500, "duration", "client failover back-off base", unit="ms")
define("dfs.client.failover.sleep.max.millis", 15000, "duration", "client failover back-off ceiling", unit="ms")

# --- ZKFC / ZooKeeper (core-default.xml ha.* keys; seed 004) ---------------------------
define("ha.zookeeper.quorum", "", "list", "ZooKeeper ensemble host:port list")
define("ha.zookeeper.session-timeout.ms", 10000, "duration", "ZooKeeper session timeout", unit="ms")
define("ha.zookeeper.parent-znode", "/hadoop-ha", doc="parent of the per-nameservice election znodes")
define("ha.zookeeper.acl", "world:anyone:rwcda", doc="ACL of the znodes the elector creates")
define("ha.zookeeper.auth", "", "list", "ZooKeeper auth scheme:credential pairs")
define("dfs.ha.zkfc.client.ssl.enabled", False, "bool",
       "the ZKFC (and zkfc -formatZK) reach ZooKeeper's secure client port with mutual TLS, presenting "
       "this process's qjournal.rpc.tls.* certificate")
define("ha.health-monitor.check-interval.ms", 1000, "duration", "HealthMonitor probe period", unit="ms")
define("ha.health-monitor.connect-retry-interval.ms", 1000, "duration",
       "HealthMonitor reconnect period", unit="ms")
define("ha.health-monitor.sleep-after-disconnect.ms", 1000, "duration",
       "HealthMonitor pause after a failed probe", unit="ms")
define("ha.health-monitor.rpc-timeout.ms", 45000, "duration", "monitorHealth RPC timeout", unit="ms")
define("ha.failover-controller.cli-check.rpc-timeout.ms", 20000, "duration",
       "haadmin health-check timeout", unit="ms")
define("ha.failover-controller.graceful-fence.rpc-timeout.ms", 5000, "duration",
       "transitionToStandby timeout during graceful fencing", unit="ms")
define("ha.failover-controller.graceful-fence.connection.retries", 1, "int",
       "connection retries during graceful fencing")
define("ha.failover-controller.new-active.rpc-timeout.ms", 60000, "duration",
       "transitionToActive timeout", unit="ms")
# ZKFC / elector / fencing keys added by the failover part (not all are Hadoop keys; units last)
define("ha.failover-controller.sleep-after-failure-to-become-active.ms", 1000, "duration",
       "elector back-off after a failed fence or transition before re-joining", unit="ms")
define("ha.failover-controller.active-standby-elector.zk.op.timeout.ms", 0, "duration",
       "deadline of one elector ZooKeeper operation (0 = the session timeout)", unit="ms")
define("dfs.ha.fencing.shell.timeout.ms", 30000, "duration", "shell(...) fencing command timeout", unit="ms")
define("dfs.ha.fencing.pidfence.wait.ms", 10000, "duration",
       "pidfence(...): how long to wait for the killed NameNode to exit", unit="ms")
define("dfs.ha.zkfc.rpc-address.<ns>.<nn>", None, "address",
       "RPC address of the ZKFC of NameNode <nn> (default: the NameNode host and dfs.ha.zkfc.port)")
define("qjournal.zkfc.http.port", 8021, "int",
       "port of the ZKFC's HTTP server (/metrics, /jmx, status page; HTTPS under dfs.http.policy = "
       "HTTPS_ONLY), on the ZKFC's RPC host (0 = any free port, announced in its READY line)")
define("qjournal.zkfc.http-address.<ns>.<nn>", None, "address",
       "HTTP address of the ZKFC of NameNode <nn> (default: the ZKFC's RPC host and qjournal.zkfc.http.port)")

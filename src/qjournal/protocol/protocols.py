"""Every protocol a qjournal daemon serves, one table each: the RPC contract as data.

Why here: the JournalNode, the NameNode and the ZKFC serve these calls; the quorum client, the
DFS client, the failover controller, the CLI, the simulator and the authorization tables call or
admit them. Each fact about a call (its name, arguments and their wire types, result, epoch gate,
ordering, ACL, deadline key) is written once, in these tables, and read by all of them
(:mod:`qjournal.protocol.rpc_contract` says how). ``tests/test_rpc_contract.py`` checks that every
handler serves exactly its tables' methods with exactly their arguments, that the docs' tables
are these rendered, and that no method name is spelled as a string anywhere else in ``src/``.

Protocols (Hadoop's interface names) and who serves them:

* :data:`QJOURNAL` (QJournalProtocol; two calls also InterQJournalProtocol's): the JournalNode.
* :data:`CLIENT` (ClientProtocol), :data:`DFSADMIN` (dfsadmin's calls, ClientProtocol methods in
  Hadoop), :data:`HA_SERVICE` (HAServiceProtocol), :data:`NAMENODE` (NamenodeProtocol): the
  NameNode.
* :data:`ZKFC` (ZKFCProtocol): the failover controller.
* :data:`REFRESH_POLICY`, :data:`REFRESH_USER_MAPPINGS`: every daemon.
"""

from __future__ import annotations

from qjournal.protocol.messages import (JournaledEdits, JournalState, Manifest, NamespaceInfo, NewEpochResponse,
                                        PrepareRecoveryResponse, RequestInfo, SegmentState, wire_bool)
from qjournal.protocol.rpc_contract import (ANY, BOOL, BYTES, INT, OPT_INT, OPT_STR, STR, STR_LIST, Arg, RpcMethod,
                                            RpcProtocol, WireType, acl_table, message_type)
from qjournal.protocol.jn_rules import validate_jid
from qjournal.protocol.segment import LAYOUT_VERSION

__all__ = ["QJOURNAL", "CLIENT", "DFSADMIN", "HA_SERVICE", "NAMENODE", "ZKFC", "REFRESH_POLICY", "REFRESH_USER_MAPPINGS",
           "ALL_PROTOCOLS", "JOURNALNODE_PROTOCOLS", "NAMENODE_PROTOCOLS", "ZKFC_PROTOCOLS", "ACL_PROTOCOL_NAMES",
           "ACL_CLIENT", "ACL_QJOURNAL", "ACL_INTERQJOURNAL", "ACL_HA", "ACL_ZKFC", "ACL_NAMENODE",
           "ACL_REFRESH_POLICY", "ACL_REFRESH_USER_MAPPINGS", "CLIENT_WRITES", "CLIENT_READS",
           "JOURNALNODE_ACLS", "NAMENODE_ACLS", "ZKFC_ACLS"]

# --- the ACL keys (Hadoop's hadoop-policy.xml keys) ----------------------------------------------

ACL_CLIENT = "security.client.protocol.acl"
ACL_QJOURNAL = "security.qjournal.service.protocol.acl"
ACL_INTERQJOURNAL = "security.interqjournal.service.protocol.acl"
ACL_HA = "security.ha.service.protocol.acl"
ACL_ZKFC = "security.zkfc.protocol.acl"
ACL_NAMENODE = "security.namenode.protocol.acl"
ACL_REFRESH_POLICY = "security.refresh.policy.protocol.acl"
ACL_REFRESH_USER_MAPPINGS = "security.refresh.user.mappings.protocol.acl"

#: ACL key -> the protocol it guards (Hadoop's interface names), for messages and the docs
ACL_PROTOCOL_NAMES: dict[str, str] = {
    ACL_CLIENT: "ClientProtocol", ACL_QJOURNAL: "QJournalProtocol", ACL_INTERQJOURNAL: "InterQJournalProtocol",
    ACL_HA: "HAServiceProtocol", ACL_ZKFC: "ZKFCProtocol", ACL_NAMENODE: "NamenodeProtocol",
    ACL_REFRESH_POLICY: "RefreshAuthorizationPolicyProtocol",
    ACL_REFRESH_USER_MAPPINGS: "RefreshUserMappingsProtocol",
}

# --- QJournalProtocol -------------------------------------------------------------------------------


def _jid(v, method: str, arg: str) -> str:
    return validate_jid(v)


def _result_bool(v, method: str, arg: str) -> bool:
    return wire_bool(v, method, arg)


JID = WireType("jid", _jid)
REQ = message_type(RequestInfo)
NS_INFO = message_type(NamespaceInfo)
SEGMENT_STATE = message_type(SegmentState)
RESULT_BOOL = WireType("bool", _result_bool)

_OPS = "dfs.qjm.operations.timeout"
_WRITE = "dfs.qjournal.write-txns.timeout.ms"
_READ = "dfs.qjournal.select-input-streams.timeout.ms"
_REQ = Arg("req", REQ)

QJOURNAL = RpcProtocol("QJournalProtocol", ACL_QJOURNAL, (
    RpcMethod("is_formatted", args=(Arg("jid", JID),), result=RESULT_BOOL, result_doc="bool",
              concurrent=True, timeout_key=_OPS),
    RpcMethod("format", args=(Arg("jid", JID), Arg("ns_info", NS_INFO), Arg("force", BOOL, False)),
              timeout_key=_OPS),
    RpcMethod("get_journal_state", args=(Arg("jid", JID),), result=message_type(JournalState),
              result_doc='`{"last_promised_epoch", "http_port", "http_url", "ns_info"}` (`ns_info`: '
                         '`NamespaceInfo.to_wire()` of a formatted journal, else None; lets `qjournal log write` '
                         'become a writer without knowing the namespace)',
              concurrent=True, acl=(ACL_QJOURNAL, ACL_INTERQJOURNAL),
              timeout_key="dfs.qjournal.get-journal-state.timeout.ms"),
    RpcMethod("new_epoch", args=(Arg("jid", JID), Arg("ns_info", NS_INFO), Arg("epoch", INT)),
              result=message_type(NewEpochResponse), result_doc='`{"last_segment_txid": int or None}`',
              timeout_key="dfs.qjournal.new-epoch.timeout.ms"),
    RpcMethod("start_log_segment", args=(_REQ, Arg("txid", INT), Arg("layout_version", INT, LAYOUT_VERSION)),
              epoch_checked=True, timeout_key="dfs.qjournal.start-segment.timeout.ms"),
    RpcMethod("journal", args=(_REQ, Arg("segment_txid", INT), Arg("first_txid", INT), Arg("num_txns", INT),
                               Arg("records", BYTES)),
              epoch_checked=True, timeout_key=_WRITE),
    RpcMethod("heartbeat", args=(_REQ,), epoch_checked=True, timeout_key=_WRITE),
    RpcMethod("finalize_log_segment", args=(_REQ, Arg("start_txid", INT), Arg("end_txid", INT)),
              epoch_checked=True, timeout_key="dfs.qjournal.finalize-segment.timeout.ms"),
    RpcMethod("purge_logs", args=(_REQ, Arg("min_txid_to_keep", INT)), epoch_checked=True, timeout_key=_OPS),
    RpcMethod("get_edit_log_manifest",
              args=(Arg("jid", JID), Arg("since_txid", INT), Arg("in_progress_ok", BOOL, False),
                    Arg("with_digests", BOOL, False)),
              result=message_type(Manifest),
              result_doc='`{"segments": [[s, e, ip], ...], "committed_txid", "last_writer_epoch"}` (only the newest '
                         'segment is ever listed in progress; an older in-progress file left by a missed finalize '
                         'is stale and not listed; with `with_digests`, a peer\'s syncer, every finalized segment '
                         'is `[s, e, false, digest]`)',
              concurrent=True, acl=(ACL_QJOURNAL, ACL_INTERQJOURNAL), timeout_key=_READ),
    RpcMethod("get_journaled_edits", args=(Arg("jid", JID), Arg("since_txid", INT), Arg("max_txns", INT)),
              result=message_type(JournaledEdits),
              result_doc='`{"first_txid", "num_txns", "records", "layout_version", "committed_txid", '
                         '"writer_epoch"}`: framed records `since_txid..` out of the edit cache, never past the '
                         'node\'s committed txid, only edits of the writer that reported it; `CacheMissError` when '
                         'the cache is off or cannot serve `since_txid` (HDFS-13150, `journalnode/edit_cache.py`)',
              concurrent=True, timeout_key=_READ),
    RpcMethod("prepare_recovery", args=(_REQ, Arg("segment_txid", INT)),
              result=message_type(PrepareRecoveryResponse),
              result_doc='`{"segment_state", "accepted_in_epoch", "last_writer_epoch", "last_committed_txid"}`',
              epoch_checked=True, timeout_key="dfs.qjournal.prepare-recovery.timeout.ms"),
    RpcMethod("accept_recovery", args=(_REQ, Arg("segment_state", SEGMENT_STATE), Arg("from_url", STR)),
              epoch_checked=True, timeout_key="dfs.qjournal.accept-recovery.timeout.ms"),
), doc="The JournalNode's calls (HDFS-3077): the writer's, the readers', and a peer's syncer's.")

# --- the NameNode: ClientProtocol (with dfsadmin's calls), HAServiceProtocol, NamenodeProtocol ----------

#: every ClientProtocol call: the caller (simple authentication; with TLS its certificate decides) ...
_CALLER = (Arg("user", STR, ""), Arg("groups", STR_LIST, ()))
#: ... a write also names itself for the retry cache (16 bytes per client, one id per call, kept across
#: retries) ...
_WRITE_ID = (Arg("client_id", BYTES, b""), Arg("call_id", INT, -1))
#: ... and the highest state id the caller has seen (HDFS-12943's alignment context)
_STATE_ID = (Arg("state_id", OPT_INT, None),)
_IDENTITY = _CALLER + _STATE_ID
_CLIENT_TIMEOUT = "qjournal.client.rpc-timeout.ms"
FILE_STATUS = WireType("FileStatus")


def _client(name: str, args: tuple[Arg, ...], result_doc: str, *, write: bool) -> RpcMethod:
    return RpcMethod(name, args=args + _CALLER + (_WRITE_ID if write else ()) + _STATE_ID, result=ANY,
                     result_doc=result_doc,
                     concurrent=True, timeout_key=_CLIENT_TIMEOUT)


_PATH = Arg("path", STR)
CLIENT = RpcProtocol("ClientProtocol", ACL_CLIENT, (
    _client("mkdirs", (_PATH, Arg("perm", INT, 0o755, "perm=0o755"), Arg("create_parent", BOOL, True)),
            "True (logs one `OP_MKDIR` per directory created)", write=True),
    _client("create", (_PATH, Arg("perm", INT, 0o644, "perm=0o644"), Arg("overwrite", BOOL, False),
                       Arg("replication", INT, 3), Arg("block_size", INT, 134217728)), "FileStatus dict", write=True),
    _client("delete", (_PATH, Arg("recursive", BOOL, False)), "True", write=True),
    _client("rename", (Arg("src", STR), Arg("dst", STR), Arg("overwrite", BOOL, False)),
            "True (into an existing directory: moves inside it)", write=True),
    _client("set_permission", (_PATH, Arg("perm", INT)), "None", write=True),
    _client("set_owner", (_PATH, Arg("owner", OPT_STR, None), Arg("group", OPT_STR, None)),
            "None (None = unchanged)", write=True),
    _client("set_times", (_PATH, Arg("mtime", INT, -1), Arg("atime", INT, -1)), "None (-1 = unchanged)",
            write=True),
    _client("set_replication", (_PATH, Arg("replication", INT)), "None", write=True),
    _client("get_file_info", (_PATH,), "FileStatus dict or None", write=False),
    _client("check_access", (_PATH, Arg("access", INT)),
            "None, or `PermissionDeniedError` (`access`: READ 4 / WRITE 2 / EXECUTE 1 bits; HDFS `checkAccess`)",
            write=False),
    _client("list_status", (_PATH,), "[FileStatus] sorted by name", write=False),
    _client("get_listing", (_PATH, Arg("start_after", STR, ""), Arg("limit", OPT_INT, None)),
            '`{"entries": [FileStatus], "remaining": int}` (HDFS `getListing`, one batch)', write=False),
    _client("get_content_summary", (_PATH,),
            '`{"length", "file_count", "directory_count", "space_consumed", "quota", "space_quota", "path"}`',
            write=False),
    _client("msync", (), "the active's last written txid, durable (HDFS-13688); refused by every other state",
            write=False),
), hidden_args=("user", "groups", "state_id", "client_id", "call_id"),
    doc="The namespace calls of `hdfs dfs`, the DFS client and WebHDFS.")

#: dfsadmin's calls (namenode/admin_protocol.py): ClientProtocol methods in Hadoop (its ACL), the
#: superuser's, served in every HA state
DFSADMIN = RpcProtocol("ClientProtocol (dfsadmin)", ACL_CLIENT, (
    _client("set_safe_mode", (Arg("action", STR, "get"),),
            "bool: in safe mode afterwards (`action`: `get` / `enter` / `leave` / `force_exit`)", write=False),
    _client("save_namespace", (Arg("time_window_s", INT, 0), Arg("tx_gap", INT, 0)),
            '`{"saved": bool, "txid": int}`; `SafeModeError` unless in safe mode', write=False),
    _client("roll_edits", (), "the new segment's first txid (the active; `SafeModeError` in safe mode)",
            write=False),
    _client("get_report", (),
            '`{"nn_id", "state", "safe_mode", "namespace_id", "cluster_id", "files", "directories", "last_txid", '
            '"last_checkpoint_txid", "last_checkpoint_time_ms", "journals"}`', write=False),
), hidden_args=("user", "groups", "state_id"), doc="dfsadmin's calls.")

#: the ClientProtocol calls that change the namespace (logged, in the retry cache)
CLIENT_WRITES = tuple(m for m in CLIENT if "client_id" in m.arg_names)
#: the ClientProtocol calls an observer may answer (HDFS-12943)
CLIENT_READS = (CLIENT.get_file_info, CLIENT.list_status, CLIENT.get_content_summary)

_SOURCE = Arg("request_source", STR, "user")
HA_SERVICE = RpcProtocol("HAServiceProtocol", ACL_HA, (
    RpcMethod("get_service_status", result=ANY,
              result_doc='`{"state": "initializing|standby|active|observer|stopping", "ready_to_become_active": '
                         'bool, "not_ready_reason": str, "last_applied_txid": int}`',
              concurrent=True, timeout_key="ha.health-monitor.rpc-timeout.ms"),
    RpcMethod("monitor_health", result_doc="None, or raises `HealthCheckFailedError`", concurrent=True,
              timeout_key="ha.health-monitor.rpc-timeout.ms"),
    RpcMethod("transition_to_active", args=(_SOURCE,), result_doc='None (`request_source`: "user" / "zkfc" / '
              '"user_forced")', concurrent=True, timeout_key="ha.failover-controller.new-active.rpc-timeout.ms"),
    RpcMethod("transition_to_standby", args=(_SOURCE,), concurrent=True,
              timeout_key="ha.failover-controller.graceful-fence.rpc-timeout.ms"),
    RpcMethod("transition_to_observer", args=(_SOURCE,),
              result_doc="None (from standby only; refused for the active)", concurrent=True,
              timeout_key="ha.failover-controller.cli-check.rpc-timeout.ms"),
), doc="The NameNode's HA states (haadmin, the ZKFC's health monitor and elector).")

NAMENODE = RpcProtocol("NamenodeProtocol", ACL_NAMENODE, (
    RpcMethod("upload_image", args=(Arg("txid", INT), Arg("data", BYTES), Arg("crc", BYTES)),
              result_doc="None (checkpoint from the standby; active only)", concurrent=True,
              timeout_key="qjournal.namenode.checkpoint.upload.timeout.ms"),
    RpcMethod("get_namespace_info", args=_IDENTITY, result=ANY, result_doc="ns_info wire dict", concurrent=True,
              timeout_key=_CLIENT_TIMEOUT),
    RpcMethod("get_image", result=ANY, result_doc='`{"txid", "data", "crc", "ns_info"}` (newest image, for '
              '`-bootstrapStandby`)', concurrent=True, timeout_key=_CLIENT_TIMEOUT),
    RpcMethod("roll_edit_log", args=_IDENTITY, result=ANY, result_doc="the new segment's first txid",
              concurrent=True, timeout_key=_CLIENT_TIMEOUT),
    RpcMethod("get_stats", args=_IDENTITY, result=ANY, result_doc="counters (edit log, tailer, retry cache, ...)",
              concurrent=True, timeout_key=_CLIENT_TIMEOUT),
), hidden_args=("user", "groups", "state_id"),
    doc="Between NameNodes: checkpoints, bootstrap, log rolls; and counters for tools.")

# --- the ZKFC -----------------------------------------------------------------------------------------

ZKFC = RpcProtocol("ZKFCProtocol", ACL_ZKFC, (
    RpcMethod("get_zkfc_status", args=(Arg("events", BOOL, False),), result=ANY,
              result_doc='`{"nameservice", "nn_id", "nn_address", "health", "service_state", "elector_state", '
                         '"zk_session", "failed"[, "events": [[wall time, name, details], ...]]}`'),
    RpcMethod("cede_active", args=(Arg("millis_to_cede", INT),), result=ANY,
              result_doc='`{"was_active", "clean"}`: local NN made standby, lock released (breadcrumb deleted if '
                         'clean), stays out of the election for `millis_to_cede`',
              timeout_key="ha.failover-controller.new-active.rpc-timeout.ms"),
    RpcMethod("graceful_failover", result=ANY,
              result_doc='`{"active", "previous", "ms"}`: asks the active\'s ZKFC to cede, then wins the election; '
                         '`ServiceFailedError` if the local NN is not healthy or it does not win in time',
              timeout_key="ha.failover-controller.new-active.rpc-timeout.ms"),
), doc="The failover controller's own calls (haadmin -failover, a peer ZKFC).")

# --- every daemon -------------------------------------------------------------------------------------

REFRESH_POLICY = RpcProtocol("RefreshAuthorizationPolicyProtocol", ACL_REFRESH_POLICY, (
    RpcMethod("refresh_service_acl", result=ANY, result_doc="the ACLs now in force, by key", concurrent=True),
))
REFRESH_USER_MAPPINGS = RpcProtocol("RefreshUserMappingsProtocol", ACL_REFRESH_USER_MAPPINGS, (
    RpcMethod("refresh_user_to_groups_mappings", concurrent=True),
))

ALL_PROTOCOLS = (QJOURNAL, CLIENT, DFSADMIN, HA_SERVICE, NAMENODE, ZKFC, REFRESH_POLICY, REFRESH_USER_MAPPINGS)
#: what each daemon serves
JOURNALNODE_PROTOCOLS = (QJOURNAL, REFRESH_POLICY, REFRESH_USER_MAPPINGS)
NAMENODE_PROTOCOLS = (CLIENT, DFSADMIN, HA_SERVICE, NAMENODE, REFRESH_POLICY, REFRESH_USER_MAPPINGS)
ZKFC_PROTOCOLS = (ZKFC, REFRESH_POLICY, REFRESH_USER_MAPPINGS)
#: method -> ACL keys admitting it, per daemon (security/service_auth.py)
JOURNALNODE_ACLS = acl_table(*JOURNALNODE_PROTOCOLS)
NAMENODE_ACLS = acl_table(*NAMENODE_PROTOCOLS)
ZKFC_ACLS = acl_table(*ZKFC_PROTOCOLS)

"""Security: who a caller is (certificate principals, auth_to_local, groups) and what it may call.

Why a package: the JournalNodes, the NameNodes and the ZKFCs all decide identity
and service-level authorization the same way, so the rules live once, below
every daemon: ``auth_to_local.py`` and ``acl.py`` (pure rule engines),
``groups.py`` (user -> groups), ``identity.py`` (certificate -> caller),
``service_auth.py`` (the per-protocol ACLs, the RPC hook and the HTTP middleware).
See docs/security.md for the threat model.
"""

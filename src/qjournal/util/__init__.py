"""qjournal.util: small I/O helpers every role shares, with no knowledge of any role.

Why a package: a durable write (``fs.atomic_write``), a storage directory's VERSION file
and lock (``storage_dir``), JSON-lines logging (``logs``), daemon processes (``proc``) and
background tasks that never die silently (``tasks``) must each be written once. Nothing
here imports another qjournal package but ``errors``.
"""

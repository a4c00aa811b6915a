"""Where qjournal lives on a host: the one home of the paths the units and the rendered files share.

Why fixed paths: the shipped systemd units (``systemd/*.service``) name the program, the
configuration directory and the log files, and the rendered ``hdfs-site.xml`` names the data
directories; both must agree on every host, so the layout is one table, as a distribution
package's would be. A site that wants other paths overrides a unit with a drop-in
(``systemctl edit``) and the data keys with its own files; ``tests/deploy`` checks that every
shipped unit uses these paths and no others.
"""

from __future__ import annotations

__all__ = ["PREFIX", "PROGRAM", "CONF_DIR", "DATA_DIR", "LOG_DIR", "UNIT_DIR", "USER", "GROUP",
           "JOURNAL_DIR", "NAME_DIR", "EDITS_DIR", "ZOOKEEPER_DIR", "DESCRIPTION_FILE"]

#: the virtual environment the wheel is installed into (its ``bin/qjournal`` runs every daemon)
PREFIX = "/opt/qjournal"
PROGRAM = f"{PREFIX}/bin/qjournal"
#: this host's configuration (``core-site.xml``, ``hdfs-site.xml``, ``zoo.cfg``, the description)
CONF_DIR = "/etc/qjournal"
#: where the operator keeps the cluster description on every host
DESCRIPTION_FILE = f"{CONF_DIR}/cluster.toml"
#: the data of every role on this host, one subdirectory each
DATA_DIR = "/var/lib/qjournal"
JOURNAL_DIR = f"{DATA_DIR}/journal"          # dfs.journalnode.edits.dir
NAME_DIR = f"{DATA_DIR}/name"                # dfs.namenode.name.dir (images)
EDITS_DIR = f"{DATA_DIR}/edits"              # dfs.namenode.edits.dir (the local edits copy)
ZOOKEEPER_DIR = f"{DATA_DIR}/zookeeper"      # zoo.cfg dataDir
#: one log file per daemon (the units append stdout and stderr there)
LOG_DIR = "/var/log/qjournal"
#: where the units go
UNIT_DIR = "/etc/systemd/system"
#: the account every daemon runs as
USER = "qjournal"
GROUP = "qjournal"

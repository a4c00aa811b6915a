"""qjournal.cli: the ``qjournal`` command, one module per subcommand.

Why a package: the CLI is the top shell of every role (daemons, admin tools, the
pipeline, the demo). ``main`` parses the subcommand and imports only that
subcommand's module, so starting a daemon never loads Spark or the other roles.
"""

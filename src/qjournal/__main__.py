"""``python -m qjournal`` is the ``qjournal`` command."""
from qjournal.cli.main import main

raise SystemExit(main())

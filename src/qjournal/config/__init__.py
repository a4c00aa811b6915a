"""qjournal.config: Hadoop-style XML configuration (see ``conf.py``) and the key table (``keys.py``)."""

from qjournal.config.conf import Configuration
from qjournal.config.keys import KEYS, Key, define, expand, lookup

__all__ = ["Configuration", "KEYS", "Key", "define", "expand", "lookup"]

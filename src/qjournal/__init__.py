"""qjournal: HDFS-grade high availability for metadata services, in Python.

Layout: one package per role; imports flow from the I/O shells down toward the pure core, never
back (``tests/test_architecture.py`` keeps the layers, bottom first): ``errors``, ``protocol`` (pure
rules and formats), ``util``, ``config``, ``transport``, ``security``, ``journalmanager`` (the
HDFS-1580 interface, FileJournal, JournalSet), ``journalnode``, ``client`` (the quorum client),
``namenode``, ``ha`` (ZKFC), ``localcluster`` and ``pipeline`` (Spark), ``sim``, ``cli``, ``chaos``.
"""

__version__ = "0.1.0"

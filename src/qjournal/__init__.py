"""qjournal: HDFS-grade high availability for metadata services, in Python.

Layout (imports flow from the I/O shells toward the pure core, never back):
``protocol`` (pure rules and formats) <- ``journal`` (HDFS-1580 interface) <-
``transport`` <- ``journalnode`` / ``client`` <- ``namenode`` <- ``ha`` <-
``cluster`` / ``cli``; ``pipeline`` (Spark) and ``sim`` sit beside them.
"""

__version__ = "0.1.0"

"""qjournal.journalmanager: the generic edit-log interface of HDFS-1580 and its local back ends.

Why a package: the NameNode writes every transaction to several journals at once (local
directories, a shared directory, a JournalNode quorum) and must never know which is which.
:class:`~qjournal.journalmanager.base.JournalManager` is that interface (seed 003 calls it
``Journal``, Hadoop ``JournalManager``); ``streams`` holds the output/input stream
interfaces and the input combinators (a chain of segments, failover between copies);
``file`` the directory back end (``FileJournal``); ``journalset`` the journal made of
journals (``JournalSet``); ``registry`` the URI-scheme lookup (``open_journal``). The
quorum back end lives in :mod:`qjournal.client`.
"""

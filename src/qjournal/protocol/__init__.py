"""qjournal.protocol: the pure core of the quorum journal. No I/O, no clock, no threads.

Why a package: the writer (``client``), the acceptor (``journalnode``), the readers and the
simulator must agree bit for bit on the segment and record format (``segment``), on every
wire message (``messages``), and on the decisions of the protocol: quorum outcomes
(``quorum``), epoch and recovery-source choice (``recovery``), and the JournalNode's request
gate (``jn_rules``). Each decision is a small synchronous function with a table test.
Everything else in qjournal imports from here; this package imports only ``errors``.
"""

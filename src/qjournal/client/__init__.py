"""qjournal.client: the writer's and reader's side of the quorum journal (HDFS-3077 QJM).

Why a package: the QuorumJournalManager is four layers, each with one job, in the
order a call goes down: :class:`QuorumJournalManager` (the Journal interface,
epochs, recovery, reads) -> :class:`QuorumOutputStream` (double buffer, sync) ->
:class:`AsyncLoggerSet` + :class:`QuorumCall` (fan out, wait for a quorum) ->
:class:`AsyncLogger` (one JournalNode: FIFO, serials, queue bound, out-of-sync).
The pure decisions they rely on live in ``qjournal.protocol.quorum`` and
``qjournal.protocol.recovery``.
"""

from qjournal.client.logger import AsyncLogger
from qjournal.client.logger_set import AsyncLoggerSet
from qjournal.client.output_stream import QuorumOutputStream
from qjournal.client.qjm import QuorumJournalManager, parse_qjournal_uri
from qjournal.client.quorum_call import QuorumCall
from qjournal.client.settings import QJMSettings

__all__ = ["AsyncLogger", "AsyncLoggerSet", "QJMSettings", "QuorumCall", "QuorumJournalManager",
           "QuorumOutputStream", "parse_qjournal_uri"]

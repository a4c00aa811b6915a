"""qjournal.journalnode: the JournalNode (HDFS-3077's acceptor) and its storage.

Why a package: one role in layers, pure core first: ``journal.Journal`` (the per-journal
rules, synchronous, storage injected; with its ``segment_index``, its ``sync_installer`` and its
``call_rule``: one call at a time), ``storage`` (the storage interface: what is durable when),
``disk_storage`` (the interface on a real disk), ``service.JournalNodeService`` (QJournalProtocol
mapped onto ``Journal`` once, behind a host), and the daemon ``node.JournalNode``: the service's
host with threads and aiohttp, its RPC server and the aiohttp server of ``http``. The simulator
hosts the same service on its simulated threads, disk and HTTP and never loads the daemon.

In-process use::

    node = JournalNode(edits_dir=d, rpc_address=("127.0.0.1", 0), http_address=("127.0.0.1", 0))
    info = await node.start()       # {"rpc": "127.0.0.1:P", "http": "127.0.0.1:Q", "http_url": ...}
    ...
    await node.stop()

or on a memory network without HTTP (segments served through ``mem://<name>``)::

    node = JournalNode(edits_dir=d, network=net, name="jn1", http=False)
"""

"""qjournal.journalnode: the JournalNode (HDFS-3077's acceptor) and its storage.

Why a package: one role in four layers, pure core first: ``journal.Journal`` (the per-journal
rules, synchronous, storage injected), ``storage`` (the storage interface: what is durable when),
``disk_storage`` (the interface on a real disk), and the asyncio daemon ``node.JournalNode``
with its RPC server and the aiohttp server of ``http``. The simulator uses the pure core with
its own storage and never loads the daemon.

In-process use::

    node = JournalNode(edits_dir=d, rpc_address=("127.0.0.1", 0), http_address=("127.0.0.1", 0))
    info = await node.start()       # {"rpc": "127.0.0.1:P", "http": "127.0.0.1:Q", "http_url": ...}
    ...
    await node.stop()

or on a memory network without HTTP (segments served through ``mem://<name>``)::

    node = JournalNode(edits_dir=d, network=net, name="jn1", http=False)
"""

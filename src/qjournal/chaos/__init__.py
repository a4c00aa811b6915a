"""Real-process chaos: the shipped programs under a seeded fault schedule.

Why a package apart from :mod:`qjournal.sim`: the simulator proves the rules on a
virtual clock; only real processes, sockets, files and signals exercise the
daemons' shells (threads, aiohttp, fsync, SIGSTOP). :mod:`.harness` runs real
JournalNodes and writers behind per-link TCP proxies (:mod:`.proxy`) and judges
the recorded history with the simulator's checker (:mod:`qjournal.sim.checker`).
The fault *schedule* replays from its seed; timing does not.
"""

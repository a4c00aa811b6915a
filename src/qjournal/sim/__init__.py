"""qjournal.sim."""

"""qjournal.protocol."""

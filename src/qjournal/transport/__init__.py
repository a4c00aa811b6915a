"""qjournal.transport."""

"""qjournal.journal."""

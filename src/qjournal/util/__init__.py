"""qjournal.util."""

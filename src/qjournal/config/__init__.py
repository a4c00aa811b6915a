"""qjournal.config."""

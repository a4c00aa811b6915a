"""qjournal.cluster."""

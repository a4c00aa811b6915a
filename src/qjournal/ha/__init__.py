"""qjournal.ha."""

"""qjournal.namenode."""

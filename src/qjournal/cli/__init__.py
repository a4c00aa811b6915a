"""qjournal.cli."""

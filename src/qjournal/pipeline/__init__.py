"""qjournal.pipeline."""

"""qjournal.client."""

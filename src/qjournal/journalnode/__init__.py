"""qjournal.journalnode."""

"""Tests of the foundation: configuration, segment format, FileJournal, JournalSet, registry, oev."""

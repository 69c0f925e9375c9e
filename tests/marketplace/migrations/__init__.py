"""The migrations: rows carried forward and back on both databases."""

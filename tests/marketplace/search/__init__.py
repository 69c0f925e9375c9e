"""The search part: keyword, nearest-first and natural-language search, pages, comparison."""

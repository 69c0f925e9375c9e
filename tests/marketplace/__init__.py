"""The marketplace feature: fast tests on SQLite and, side by side, the same tests on PostgreSQL (``suite.py``) and on the real engine."""

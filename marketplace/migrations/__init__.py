"""Alembic migrations of the marketplace schema (SQLite and PostgreSQL)."""

"""Resumable streaming sessions: event log, stores, producer, resume and cancel."""

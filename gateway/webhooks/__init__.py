"""Signed webhooks (Standard Webhooks) for batches and background responses, delivered from a durable outbox."""

"""The gateway's own schema history: one Alembic history, one version table, every ``gateway_`` table.

Revisions form one line (``versions/``: ``g0001`` keys, teams and usage; ``g0002`` files,
batches and webhooks; ``g0003`` a batch's ``output_expires_after``; ``g0004`` its cached and
reasoning tokens; the next one ``g0005``, whichever package its tables serve). The version table
is ``gateway_alembic_version``, so the marketplace's history (a feature, with its own table
``marketplace_alembic_version``) shares a database without sharing a history.
"""

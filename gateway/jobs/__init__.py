"""What files, batches and webhooks share: their view of the gateway's database, ids, owners, paging.

Their tables live in the gateway's own database (``gateway.database``: ``DATABASE_URL``, one
engine, one Alembic history with the keys' tables, ``gateway.database.tables.jobs``);
``store.JobsDatabase`` turns its failures, and its not being migrated yet, into 503s
(docs/batches.md).
"""

"""The gateway's own database (``DATABASE_URL``): one home for its engine, its tables and their history.

Every table the gateway itself keeps (``gateway_*``: keys, teams, the usage ledger; files,
batches, webhook endpoints and the outbox) lives here, below every package that uses it
(tenancy, jobs, and whatever comes next), so each of them gets the same engine, the same
migrations and the same readiness instead of a copy of their own:

- ``engine``: the async engine factory (SQLite pragmas; PostgreSQL pool size, connect, pool
  and statement timeouts), the one reading of a database URL for these tables;
- ``metadata`` + ``tables/``: the table definitions, one module per package that uses them;
- ``migrations/``: one Alembic history, one version table (``gateway_alembic_version``);
- ``service``: ``GatewayDatabase``, the engine and the migration run at start, once per process.
- ``pg_schema``: the set-up of the session store's and stored responses' PostgreSQL tables (their
  DDL run only when something is missing: it would lock tables other replicas are using).

Named ``database``, not ``store``: "store" already means the session store
(``gateway.sessions.store``, ``SESSION_STORE``) and each feature's view of its data (the key
store, the batch store); this package is the database those stores are kept in, the one
``DATABASE_URL`` names. Features outside the core (the marketplace) keep their own history,
and the session store its own tables, for now (docs/decisions.md).
"""

"""Tenancy: keys kept in the database, teams, limits that hold across replicas, the usage ledger.

Below ``gateway.http`` in the layers, so the middleware can resolve keys and ask the limiter
without this package knowing HTTP: nothing here raises a status, answers a request or imports
FastAPI. The admin API that manages it lives in ``gateway.protocols.admin``.

- ``model``: the shapes every part shares (limits, priority bands, a resolved key);
- ``ids``: key and team ids, key secrets and their digests;
- its tables live in the gateway's own database (``gateway.database``: the engine, the one
  migration history, ``gateway.database.tables.tenancy``);
- ``store``: teams and keys in the database; ``resolver``: a bearer token to its key, through
  a cache that every replica invalidates within a second;
- ``limits``: the check-and-reserve limiter (Redis, or in process);
- ``usage``: the ledger (aggregated in memory, written in batches) and its reports;
- ``service``: ``Tenancy``, all of it assembled from the settings, started and stopped once.
"""

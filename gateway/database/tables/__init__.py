"""Every table of the gateway's own database, one module per package that uses them.

- ``tenancy``: keys, teams, the usage ledger, the change counter (``gateway.tenancy``);
- ``jobs``: files, batches and their lines, webhook endpoints and the outbox (``gateway.jobs``
  and the files, batches and webhooks packages above it).

A new table goes into the module of the package that uses it (or a new module here) and into a
new revision of ``gateway.database.migrations``; ``metadata`` below holds them all once this
package is imported.
"""

from __future__ import annotations

from gateway.database.metadata import metadata
from gateway.database.tables import jobs, tenancy

__all__ = ["jobs", "metadata", "tenancy"]

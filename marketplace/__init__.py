"""The AI marketplace backend, a gateway feature: its parts, each a package, lower ones first.

- ``places``: geography without a network: points and geodesic distances (``geo``,
  ``geodesy``, ``sphere``), the offline gazetteer of Indonesian places and ``/api/places``.
- ``database``: engines for SQLite and PostgreSQL, the tables' base, whether the database can
  serve (``availability``), a database session per request and outages as 503s.
- ``catalogue``: suppliers, products and the category tree; the demo catalogue.
- ``search``: keyword, nearest-first and natural-language search (the query parser, the
  engine's reading), pages by cursor, comparison across suppliers.
- ``users``: users owned by the API key that registered them, who may see whom
  (``access``), end-user tokens.
- ``chat``: ``/api/chat`` answered from nearby in-stock products, and its conversations (a
  user's chat threads) with their messages.
- ``migrations``: the Alembic history of the schema, run at start-up.

Beside them: ``feature`` (the entry point), ``lifecycle`` (start, stop, readiness),
``cleanup`` (tokens and conversations past their use), ``settings``, ``errors``, ``inputs``
(what every request body shares), ``untrusted`` (text made safe for a prompt), ``state``
(what routes reach on the running feature) and ``seed`` (``python -m marketplace.seed``).
Each part imports only the parts below it (import-linter contracts in ``pyproject.toml``);
the marketplace imports only ``gateway.api`` of the gateway.
"""

"""The admin API: keys and teams kept in the gateway's database, and the usage ledger's reports.

``schemas`` (what clients send and get), ``keys``, ``teams``, ``usage`` (thin routes over
``gateway.tenancy``), ``errors`` (tenancy's exceptions as HTTP, in one place), ``routes``
(the router). Every ``/admin`` route needs an admin key (``ADMIN_API_KEYS`` or a database key
of role ``admin``); ``GET /v1/usage`` any key, for its own usage.
"""

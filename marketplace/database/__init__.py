"""The marketplace's database: engines for SQLite and PostgreSQL (``engines``), the base of every
table (``tables``), whether the database can serve now and what happens while it cannot
(``availability``), and how a request meets it (``requests``: a session per request, outages
as 503s, never 500s)."""

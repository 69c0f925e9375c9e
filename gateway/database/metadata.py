"""The one ``MetaData`` every table of the gateway's own database is declared on.

One collection, so one Alembic history can compare the whole schema with the code
(``tests/gateway/database/test_migrations.py``) and autogenerate a revision from it. Every
table's name starts with ``gateway_``: they may share a database with a feature's (the
marketplace's) and with the session store's.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

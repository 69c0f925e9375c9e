"""Every part's tables in one metadata: what the migrations build and the models must agree with.

Each part declares its own tables (``catalogue.models``, ``users.models``, ``chat.models``,
``database.secrets``) on the one declarative base (``database.tables``); importing them here
registers them all, for Alembic's ``env.py`` and for the test that compares the migrated
schema with the models.
"""

from __future__ import annotations

from marketplace.catalogue.models import Product, Supplier
from marketplace.chat.models import Conversation, Message
from marketplace.database.secrets import Secret
from marketplace.database.tables import Base
from marketplace.users.models import User, UserToken

TABLES = (Supplier, Product, User, UserToken, Conversation, Message, Secret)
metadata = Base.metadata

"""Keys the marketplace keeps in its own database (``marketplace_secrets``), so every worker and
replica shares them: today the search cursors' signing key (``marketplace.search.service.cursor``)."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.database.tables import Base


class Secret(Base):
    __tablename__ = "marketplace_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))

"""The marketplace's own settings (environment variables), separate from the gateway's.

Each field maps to the environment variable of the same name in upper case
(``ai_search_timeout_seconds`` <- ``AI_SEARCH_TIMEOUT_SECONDS``); docs/marketplace.md lists them.
``MARKETPLACE_DATABASE_URL`` names the marketplace's database; unset, it shares the
gateway's ``DATABASE_URL`` (one SQLite file by default). ``SEED_DEMO_DATA`` loads the demo
catalogue into an empty database at start-up. The ``AI_SEARCH_*`` settings decide whether and
how ``POST /api/products/ai-search`` asks the engine to read a query. The ``MARKETPLACE_DB_*``
settings say how long start-up waits for the database and how often it is retried while down.
The ``MARKETPLACE_CONVERSATION_RETENTION_DAYS`` and ``MARKETPLACE_CLEANUP_*`` settings say how
long conversations are kept and how the periodic clean-up runs (``marketplace.cleanup``).
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


class MarketplaceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False,
                                      hide_input_in_errors=True,  # (an error never echoes a value)
                                      allow_inf_nan=False)  # ("inf" would pass every bound)

    marketplace_database_url: str = Field("", repr=False)  # empty: the gateway's DATABASE_URL (may hold a password)
    seed_demo_data: bool = False
    # POST /api/products/ai-search asks the engine to read the query (structured outputs);
    # false: the rule-based parser alone.
    ai_search_engine: bool = True
    # How long a search waits for the engine's reading before it goes on with the rules alone.
    ai_search_timeout_seconds: float = Field(4.0, gt=0, le=60)
    # Room for the JSON answer (a real model needs 60-150 tokens; the schema bounds every field).
    ai_search_max_tokens: int = Field(300, ge=32, le=2048)

    # A database that is down at start-up or later costs the marketplace only (marketplace.availability):
    # how long the gateway's start waits for it, then how often it is tried again in the background.
    marketplace_db_start_wait_seconds: float = Field(30.0, ge=0, le=600)
    marketplace_db_retry_seconds: float = Field(0.5, gt=0, le=60)
    marketplace_db_retry_max_seconds: float = Field(30.0, gt=0, le=600)

    # Personal data is not kept forever (marketplace.cleanup): a conversation unused for this many
    # days is deleted with its messages (0: kept until its user is erased). Expired and revoked
    # end-user tokens, and those of removed keys, are deleted whatever this says.
    marketplace_conversation_retention_days: float = Field(365.0, ge=0, le=36_500)
    # How often each worker runs the clean-up, and how many rows of each kind one pass deletes at
    # most (a pass that hits the bound is followed by another within a second).
    marketplace_cleanup_interval_seconds: float = Field(3600.0, gt=0, le=7 * 86_400)
    marketplace_cleanup_batch: int = Field(1000, ge=1, le=100_000)

    @field_validator("marketplace_database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        # Refused at assembly (stack-gateway's start-up line), not a traceback when the lifespan connects.
        if value:
            try:
                backend = make_url(value).get_backend_name()
            except ArgumentError:
                backend = None
            if backend not in ("sqlite", "postgresql"):
                raise ValueError("MARKETPLACE_DATABASE_URL must be a sqlite+aiosqlite:///PATH or "
                                 "postgresql+asyncpg://USER:PASSWORD@HOST/DB URL (empty: DATABASE_URL)")
        return value

    def database_url(self, gateway_database_url: str) -> str:
        return self.marketplace_database_url or gateway_database_url

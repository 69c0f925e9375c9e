"""The marketplace's own settings (environment variables), separate from the gateway's.

``MARKETPLACE_DATABASE_URL`` names the marketplace's database; unset, it shares the
gateway's ``DATABASE_URL`` (one SQLite file by default). ``SEED_DEMO_DATA`` loads the demo
catalogue into an empty database at start-up.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class MarketplaceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    marketplace_database_url: str = ""  # empty: the gateway's DATABASE_URL
    seed_demo_data: bool = False

    def database_url(self, gateway_database_url: str) -> str:
        return self.marketplace_database_url or gateway_database_url

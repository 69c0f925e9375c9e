"""The playground's own setting: whether the gateway serves the page.

``PLAYGROUND`` is ``auto`` (default), ``on`` or ``off``; ``true``/``false``, ``1``/``0`` and
``yes``/``no`` are read as ``on``/``off``. ``auto`` serves the page when the gateway binds a
loopback address (a developer's machine, ``make run``) and not when it listens beyond it (a
shared deployment), where an operator turns it on deliberately. The page holds no data and
no secret: every call it makes needs an API key like any other client, so turning it on
exposes nothing that the API does not.
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.api import is_loopback

_SYNONYMS = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}


class PlaygroundSettings(BaseSettings):
    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    playground: Literal["auto", "on", "off"] = "auto"

    @field_validator("playground", mode="before")
    @classmethod
    def _synonyms(cls, value: object) -> object:
        if isinstance(value, str):
            folded = value.strip().lower()
            return _SYNONYMS.get(folded, folded)
        return value

    def serves_page(self, *, host: str) -> bool:
        """Whether a gateway bound to ``host`` serves the page."""
        if self.playground == "auto":
            return is_loopback(host)
        return self.playground == "on"

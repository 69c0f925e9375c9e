"""Gateway settings: one object, read from the environment, given to everything at assembly.

Every field maps to an environment variable of the same name in upper case
(``vllm_base_url`` <- ``VLLM_BASE_URL``). Features keep their own settings classes (see
``gateway.api.Feature``). The README's configuration table lists them all; a test checks
that compose.yaml only sets variables the gateway or a feature reads.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    # --- serving -----------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    reload: bool = False
    workers: int = Field(1, ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # How long a stopping gateway lets open requests finish; live streams get their explicit
    # ending a second before it runs out (sessions without a client at once).
    graceful_shutdown_seconds: float = Field(10.0, ge=1)
    access_log: bool = True  # one JSON line per request (never per chunk)

    # --- the engine --------------------------------------------------------
    vllm_base_url: str = "http://127.0.0.1:8001"
    vllm_api_key: SecretStr | None = None
    # The name the gateway reports as ``model`` and sends upstream when a client
    # uses an alias. Empty: the engine's first served model.
    model_path: str = ""
    model_aliases: CommaList = Field(default_factory=lambda: ["stack-2.9"])
    device: str = ""  # reported by /health and /model-info, never used to place the model
    upstream_connect_timeout: float = Field(5.0, gt=0)
    upstream_first_byte_timeout: float = Field(300.0, gt=0)
    upstream_chunk_timeout: float = Field(60.0, gt=0)
    upstream_max_connections: int = Field(1024, ge=1)
    engine_poll_interval: float = Field(5.0, gt=0)
    sse_keepalive_seconds: float = Field(15.0, gt=0)

    # --- the engine fleet (docs/fleet.md) ---------------------------------------
    # Several engines: "URL" or "URL|KEY" items (KEY: that engine's own API key, else
    # VLLM_API_KEY). Set, it replaces VLLM_BASE_URL; VLLM_DNS_URL replaces both.
    vllm_base_urls: CommaList = Field(default_factory=list, repr=False)  # may hold keys
    # "http://NAME:PORT": every address NAME resolves to is an engine (a Kubernetes headless
    # Service), re-resolved every VLLM_DNS_REFRESH_SECONDS.
    vllm_dns_url: str = ""
    vllm_dns_refresh_seconds: float = Field(10.0, gt=0)
    # Seconds between two reads of each engine's /metrics (load, prefix cache); 0: never.
    engine_metrics_interval: float = Field(1.0, ge=0)
    routing_policy: Literal["prefix", "session", "least_load", "round_robin"] = "prefix"
    # An affinity (session or prefix) holds while its engine's load stays within this factor
    # of the fleet's mean (consistent hashing with bounded loads).
    routing_load_bound: float = Field(1.25, ge=1.0)
    # Engines tried for one request before its failure reaches the client (and engines a
    # stream may switch to after its engine fails).
    engine_max_attempts: int = Field(3, ge=1)
    # How long an engine that failed a request gets none (doubled for each failure in a row, up to 60 s).
    engine_eject_seconds: float = Field(5.0, ge=0)
    # A resumable stream whose engine dies or stalls is produced again on another engine.
    stream_continuation: bool = True

    # --- security and admission ---------------------------------------------
    # Comma-separated keys, each either the key itself or "sha256:<hex digest>".
    # API_KEYS may read (OpenAI routes, code API, search, chat); ADMIN_API_KEYS
    # may also write (marketplace catalogue and users).
    api_keys: CommaList = Field(default_factory=list)
    admin_api_keys: CommaList = Field(default_factory=list)
    metrics_require_auth: bool = True
    max_inflight: int = Field(512, ge=1)
    max_inflight_per_key: int = Field(128, ge=1)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)

    # --- code-generation API (Stack 2.9 contract) ----------------------------
    default_max_tokens: int = Field(512, ge=1, le=4096)
    default_temperature: float = Field(0.2, ge=0.0, le=2.0)
    default_top_p: float = Field(0.95, ge=0.0, le=1.0)

    # --- resumable sessions --------------------------------------------------
    session_store: Literal["off", "memory", "sqlite", "postgres"] = "sqlite"
    sessions_database_url: str = ""  # empty: DATABASE_URL
    session_ring_size: int = Field(4096, ge=16)
    sessions_ttl_seconds: float = Field(3600.0, gt=0)
    cancel_after_disconnect_seconds: float = Field(30.0, ge=0)
    session_flush_interval: float = Field(0.05, gt=0)
    # A replica renews its heartbeat every third of this; a live session whose
    # replica stayed silent longer is ended (error event + [DONE]) by whoever
    # notices: after a crash, resuming clients wait at most this long.
    session_lease_seconds: float = Field(15.0, gt=0)
    # SESSION_STORE=memory only: finished sessions kept resumable in memory
    # (the oldest beyond this are forgotten). Persistent stores keep none.
    session_memory_max_finished: int = Field(512, ge=0)

    # --- the gateway's database and its features --------------------------------
    # The session store's database unless SESSIONS_DATABASE_URL says otherwise; features
    # that keep data use it too unless their own setting names another.
    database_url: str = "sqlite+aiosqlite:///./data/stack.db"
    # Which installed features run: "all", "none", or names (e.g. "marketplace").
    features: CommaList = Field(default_factory=lambda: ["all"])

    @field_validator("model_aliases", "api_keys", "admin_api_keys", "features", "vllm_base_urls", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        return _split_commas(value)

    @field_validator("vllm_base_url", "vllm_dns_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @model_validator(mode="after")
    def _bind_safely(self) -> "Settings":
        # No key configured means nobody can be told apart: serve loopback only.
        if not self.auth_enabled and not is_loopback(self.host):
            self._unsafe_host_refused = self.host
            self.host = "127.0.0.1"
        return self

    _unsafe_host_refused: str | None = PrivateAttr(None)

    @property
    def unsafe_host_refused(self) -> str | None:
        """The non-loopback host asked for without any API key, if any."""
        return self._unsafe_host_refused

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys or self.admin_api_keys)

    @property
    def effective_sessions_database_url(self) -> str:
        return self.sessions_database_url or self.database_url


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

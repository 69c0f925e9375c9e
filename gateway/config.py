"""Gateway settings: one object, read from the environment, given to everything at assembly.

Every field maps to an environment variable of the same name in upper case
(``vllm_base_url`` <- ``VLLM_BASE_URL``). Features keep their own settings classes (see
``gateway.api.Feature``). The README's configuration table lists them all; a test checks
that compose.yaml only sets variables the gateway or a feature reads.

Secrets never show when settings are printed or logged: the keys are ``SecretStr`` (``repr``
shows ``**********``), a database URL's password is masked in ``repr``, and a validation
error names the setting and the reason but never echoes the value given (a too-short
``KEY_ID_SECRET`` was printed whole in the start-up error).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

CommaList = Annotated[list[str], NoDecode]
SecretList = Annotated[list[SecretStr], NoDecode]  # comma-separated secrets: each shown as **********

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
# The engine's operational routes an admin key may be allowed to reach (ENGINE_ADMIN_ROUTES):
# each affects only the engine's caches or adapters, never other clients' requests, the
# weights, or the process (sleep, collective_rpc, pause, abort_requests stay refused).
ADMIN_CAPABLE_ROUTES = ("/reset_prefix_cache", "/reset_mm_cache", "/v1/load_lora_adapter", "/v1/unload_lora_adapter")


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    # allow_inf_nan=False: "inf" passed every bound (GRACEFUL_SHUTDOWN_SECONDS=inf, SESSION_FLUSH_INTERVAL=inf
    # started a gateway that would never stop or never write its sessions).
    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False,
                                      hide_input_in_errors=True, allow_inf_nan=False)

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
    # Networks (CIDR, comma-separated) an address VLLM_DNS_URL resolves to must lie in to become
    # an engine (and receive VLLM_API_KEY); any other is refused and logged. Empty: any address.
    vllm_dns_networks: CommaList = Field(default_factory=list)
    # Seconds between two reads of each engine's /metrics (load, prefix cache); 0: never.
    engine_metrics_interval: float = Field(1.0, ge=0)
    # "session" is accepted for "affinity" (its name before; a session is a resumable generation).
    routing_policy: Literal["prefix", "affinity", "session", "least_load", "round_robin"] = "prefix"
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
    # API_KEYS may use the engine (OpenAI routes, code API) and read the marketplace catalogue;
    # APP_API_KEYS may also act for marketplace users (users, chat, end-user tokens);
    # ADMIN_API_KEYS may also write the catalogue (and do what an app key does).
    api_keys: SecretList = Field(default_factory=list)
    app_api_keys: SecretList = Field(default_factory=list)
    admin_api_keys: SecretList = Field(default_factory=list)
    # The HMAC secret of key ids (gateway.http.key_ids): the same on every replica. Unset: kept
    # beside a SQLite DATABASE_URL (generated once), else random per process.
    key_id_secret: SecretStr | None = Field(None, repr=False)
    metrics_require_auth: bool = True
    # Keys that may read /metrics and nothing else (a Prometheus scraper's); admin keys may too.
    metrics_api_keys: SecretList = Field(default_factory=list)
    # Without any API key the gateway answers only requests whose Host is this machine
    # (localhost, a loopback address: no DNS rebinding); more names it may be reached by.
    allowed_hosts: CommaList = Field(default_factory=list)
    max_inflight: int = Field(512, ge=1)
    max_inflight_per_key: int = Field(128, ge=1)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # The request line and headers: their size (431 beyond) and the time they may take to arrive
    # (408 beyond), which uvicorn's httptools protocol does not bound (gateway.http.request_head);
    # and the body's.
    request_head_max_bytes: int = Field(64 * 1024, ge=1024)
    request_head_timeout_seconds: float = Field(30.0, gt=0)
    # A body must come at a pace: within this many seconds of the head's end, plus a second per
    # REQUEST_BODY_MIN_RATE bytes received (Apache's RequestReadTimeout body=20,MinRate=500).
    request_body_timeout_seconds: float = Field(30.0, gt=0)
    request_body_min_rate: float = Field(500.0, gt=0)
    # Open connections per worker beyond which the server answers 503 before reading a request.
    max_connections: int = Field(4096, ge=16)
    # Web pages of these origins may call the gateway from a browser (CORS; gateway.http.cors):
    # exact origins ("https://app.example.com", "http://localhost:5173"), or "*" alone for any
    # page. Empty: no CORS headers at all (browsers allow only same-origin pages).
    cors_origins: CommaList = Field(default_factory=list)

    # --- flow control: queueing by priority band, fair shares (docs/flow-control.md) ----
    # Off: generating requests go straight to the engines (no queue, no bands, no priority sent).
    flow_control: bool = True
    # The bands, highest first, and the band of a key or team that names none.
    flow_bands: CommaList = Field(default_factory=lambda: ["interactive", "standard", "batch"])
    flow_default_band: str = "standard"
    # Requests that may wait per model (0: none wait, a request that cannot go now is refused),
    # and per API key over all models.
    flow_queue_max: int = Field(1024, ge=0)
    flow_queue_max_per_key: int = Field(256, ge=0)
    # How long a request may wait before it is refused (429 when its key or team was at its own
    # limit, else 503).
    flow_queue_timeout_seconds: float = Field(30.0, gt=0)
    # A lower band with waiting requests is served at least once per this many seconds,
    # however busy the higher bands keep the engines.
    flow_aging_seconds: float = Field(10.0, gt=0)
    # Requests that may wait inside each engine before the gateway holds the next ones.
    flow_engine_max_waiting: int = Field(5, ge=0)
    # Running slots of each engine the lowest band (batch) leaves to the higher bands once the
    # engine was seen saturated (it also never waits inside an engine): an interactive request
    # then finds a slot instead of waiting for a batch generation to end. 0: none kept.
    flow_headroom_slots: int = Field(1, ge=0)
    # While a higher band has a request in flight on an engine (or waiting for the model), the
    # lowest band (batch) keeps at most FLOW_YIELD_FLOOR requests there, saturated or not
    # (flow/yielding.py): interactive requests share a decode batch without the batch's lines.
    # FLOW_YIELD=false: the lowest band keeps every slot the rules above give it.
    flow_yield: bool = True
    flow_yield_floor: int = Field(2, ge=1)
    # The engines' vLLM scheduling policy, as launch_vllm.sh's setting of the same name starts
    # them: with "priority" requests carry their band's ``priority`` (vLLM 0.32 ignores the field
    # under fcfs, so a wrong value here fails silently: set both from one variable).
    engine_scheduling_policy: Literal["fcfs", "priority"] = "fcfs"

    # --- tracing: OpenTelemetry, off unless an OTLP endpoint is set (docs/tracing.md) ----
    # The standard OTEL_* variables, read here like every other setting. Traces go to
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the full URL), else OTEL_EXPORTER_OTLP_ENDPOINT
    # (+ /v1/traces over HTTP); neither set, or OTEL_SDK_DISABLED: no tracing, no cost.
    otel_exporter_otlp_traces_endpoint: str = ""
    otel_exporter_otlp_endpoint: str = ""
    otel_exporter_otlp_protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    # "name=value,..." sent with every export (a vendor's API key): a secret, never shown.
    otel_exporter_otlp_headers: SecretStr | None = Field(None, repr=False)
    otel_exporter_otlp_timeout: float = Field(5000.0, gt=0)  # ms per export attempt (its retries included)
    # The traces' own variants of the three above, which win over them (the OTLP exporter specification).
    otel_exporter_otlp_traces_protocol: Literal["http/protobuf", "grpc"] | None = None
    otel_exporter_otlp_traces_headers: SecretStr | None = Field(None, repr=False)
    otel_exporter_otlp_traces_timeout: float | None = Field(None, gt=0)
    otel_sdk_disabled: bool = False
    # None: OTEL_RESOURCE_ATTRIBUTES' service.name if it has one, else "stack-gateway".
    otel_service_name: str | None = None
    # The specification's samplers (unset: parentbased_traceidratio, the gateway's documented default).
    otel_traces_sampler: Literal["always_on", "always_off", "traceidratio", "parentbased_always_on",
                                 "parentbased_always_off", "parentbased_traceidratio"] | None = None
    # The ratio samplers' share of new traces kept (parent-based: a sampled incoming traceparent is always kept).
    otel_traces_sampler_arg: float = Field(1.0, ge=0, le=1)
    otel_bsp_max_queue_size: int = Field(2048, ge=1)  # spans waiting for export; beyond: dropped
    otel_bsp_schedule_delay: float = Field(5000.0, gt=0)  # ms between two exports
    # "gen_ai_latest_experimental": the GenAI conventions' latest names (gen_ai.provider.name, ...)
    otel_semconv_stability_opt_in: CommaList = Field(default_factory=list)

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
    # How long one call to the session store or the stored responses may take (connecting,
    # waiting for a connection, one statement); past it the store counts as unavailable (503).
    session_store_timeout_seconds: float = Field(5.0, gt=0, le=300)
    # SESSION_STORE=memory only: finished sessions kept resumable in memory, per API key
    # (a key's oldest beyond this are forgotten). Persistent stores keep none.
    session_memory_max_finished: int = Field(512, ge=0)
    # Live generations per API key, including those that run on after their client left
    # (429 beyond). Empty: MAX_INFLIGHT_PER_KEY (plus FLOW_QUEUE_MAX_PER_KEY with flow control on).
    max_live_sessions_per_key: int | None = Field(None, ge=1)
    # Bytes of events not yet persisted (a store that is down or slow) beyond which new
    # streams are refused (503) until the store catches up; memory stays bounded.
    session_max_unpersisted_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    # The hard bound on event bytes held in memory for a store that does not take them: beyond
    # it the writer stops persisting the generations holding the most (their clients are still
    # fed from memory; the store gets an error ending where its copy stops). docs/sessions.md.
    session_max_held_bytes: int = Field(256 * 1024 * 1024, ge=1024)

    # --- the Responses API (stored responses, background runs) -------------------------
    # How long a stored response (``store`` not false) can be retrieved and continued with
    # ``previous_response_id``; OpenAI keeps them 30 days. The event stream of a background
    # run stays replayable for SESSIONS_TTL_SECONDS.
    responses_retention_seconds: float = Field(30 * 24 * 3600.0, gt=0)
    # SESSION_STORE=memory or off: stored responses kept in memory (the oldest beyond this
    # are forgotten). The persistent stores keep them in their database.
    responses_memory_max: int = Field(1024, ge=1)
    # Per API key: stored responses (not expired) and their stored bytes at most; a request
    # that would store one more beyond either is refused (429, responses_quota_exceeded).
    responses_max_per_key: int = Field(10_000, ge=1)
    responses_max_bytes_per_key: int = Field(256 * 1024 * 1024, ge=1024)

    # --- the engine's operational routes ---------------------------------------------------
    # Which of the engine's admin-capable routes an ADMIN_API_KEYS key may reach (relayed to
    # vLLM, which serves them only in its dev mode or with runtime LoRA updating). Any other
    # operational route is never reachable. Empty: none. See docs/api.md.
    engine_admin_routes: CommaList = Field(
        default_factory=lambda: ["/reset_prefix_cache", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"])

    # --- keys, limits and usage (docs/keys.md) ---------------------------------------
    # Where limits are counted across replicas ("redis://[:password@]host:port/db"). Empty:
    # in each process (per replica; the gateway warns with WORKERS > 1 or PostgreSQL).
    redis_url: str = Field("", repr=False)  # may hold a password
    # Every Redis call's deadline; past it Redis counts as down (probed every 0.5 s).
    redis_timeout_seconds: float = Field(0.25, gt=0, le=5)
    # While Redis is down: "local" (each replica enforces the limits alone) or "closed"
    # (requests of keys with limits are refused with 503).
    limits_when_redis_down: Literal["local", "closed"] = "local"
    # A concurrency slot is a lease this long, renewed every third of it while its request is in
    # flight (tenancy.limits.limiter): a replica that died frees its slots after this.
    limit_lease_seconds: float = Field(300.0, ge=10)
    # How long a rotated key's old secret keeps working (POST /admin/keys/{id}/rotate may
    # name another, up to 30 days).
    key_rotation_grace_seconds: float = Field(3600.0, ge=0, le=30 * 86400)
    # How often each replica polls the key store's change counter (a revoked key is refused
    # everywhere within about this plus the poll's time).
    key_cache_poll_seconds: float = Field(0.25, gt=0, le=0.5)
    key_cache_size: int = Field(10_000, ge=100)
    # The usage ledger: sums written every USAGE_FLUSH_SECONDS; at most USAGE_BUFFER_ROWS rows
    # wait in memory (while the database is down).
    usage_flush_seconds: float = Field(2.0, gt=0, le=300)
    usage_buffer_rows: int = Field(50_000, ge=100)
    # Prices per model in USD per 1M tokens, JSON: {"MODEL": {"input": 0.2, "cached_input": 0.05,
    # "output": 0.6}} (checked at start: gateway.tenancy.usage.prices).
    usage_prices: str = ""

    # --- the gateway's database and its features --------------------------------
    # The session store's database unless SESSIONS_DATABASE_URL says otherwise; features
    # that keep data use it too unless their own setting names another.
    database_url: str = "sqlite+aiosqlite:///./data/stack.db"
    # The gateway's own tables in DATABASE_URL (keys, usage, files, batches, webhooks; one engine
    # per process, gateway.database): connections each process keeps at most, how long connecting
    # or waiting for a free connection may take, and how long one statement may run (PostgreSQL;
    # SQLite waits at most 10 s for another writer). Past either: that feature answers 503.
    database_pool_size: int = Field(10, ge=1, le=1000)
    database_timeout_seconds: float = Field(5.0, gt=0, le=300)
    database_statement_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    # Which installed features run: "all", "none", or names (e.g. "marketplace").
    features: CommaList = Field(default_factory=lambda: ["all"])

    # --- files, batches and webhooks (docs/batches.md) ----------------------------------
    # Off: no /v1/files, /v1/batches, /v1/messages/batches or /admin/webhooks, no tables.
    batches_enabled: bool = True
    # Where uploaded and produced files live: in the database, or one file each in FILES_DIRECTORY.
    files_storage: Literal["database", "directory"] = "database"
    files_directory: str = "./data/files"
    # The largest upload (OpenAI's batch input limit); the upload route's own body limit, not MAX_BODY_BYTES.
    files_max_bytes: int = Field(200 * 1024 * 1024, ge=1)
    files_quota_bytes_per_key: int = Field(1024 * 1024 * 1024, ge=0)
    files_max_per_key: int = Field(10_000, ge=1)  # files one key keeps (an empty one takes no quota)
    # How long a file is kept when its upload names no expiry (OpenAI keeps batch files 30 days).
    files_retention_seconds: float = Field(30 * 24 * 3600.0, gt=0)
    # The address clients reach the gateway at, for the URLs it hands out (a Message Batch's results_url):
    # behind a TLS-terminating proxy the request's own address would be http:// (docs/batches.md).
    public_base_url: str | None = None
    batch_max_lines: int = Field(50_000, ge=1)
    # Lines of batches one replica runs at once (the engines' batch band sees at most this many).
    batch_concurrency: int = Field(8, ge=1)
    # What a completion_window of "24h" lasts (tests shorten it to see expiry).
    batch_window_seconds: float = Field(24 * 3600.0, gt=0)
    # A replica renews its batches' leases this often; a batch whose lease ran out is taken over.
    batch_lease_seconds: float = Field(15.0, gt=0)
    batch_poll_seconds: float = Field(1.0, gt=0)
    batch_line_max_attempts: int = Field(3, ge=1)  # an engine that is down: tries per line, then its error
    # Networks webhook destinations may be in although private, loopback or link-local (CIDRs).
    webhook_allowed_networks: CommaList = Field(default_factory=list)
    webhook_timeout_seconds: float = Field(10.0, gt=0)
    webhook_max_attempts: int = Field(8, ge=1)
    webhook_backoff_seconds: float = Field(5.0, gt=0)  # the first retry's delay; doubled each time
    webhook_concurrency: int = Field(8, ge=1)
    # How long an ended batch (a Message Batch's results with it) and a finished webhook delivery are kept
    # before the sweep removes them (Anthropic keeps a Message Batch's results 29 days, OpenAI its files 30).
    jobs_retention_seconds: float = Field(30 * 24 * 3600.0, gt=0)

    @field_validator("model_aliases", "api_keys", "app_api_keys", "admin_api_keys", "metrics_api_keys", "features",
                     "engine_admin_routes", "vllm_base_urls", "cors_origins", "allowed_hosts", "vllm_dns_networks",
                     "flow_bands", "webhook_allowed_networks", "otel_semconv_stability_opt_in", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        return _split_commas(value)

    @model_validator(mode="before")
    @classmethod
    def _empty_is_unset(cls, values: object) -> object:
        # NAME= (empty, as compose passes an unset ${NAME:-}) is the default where the table's default is
        # "empty" (MAX_LIVE_SESSIONS_PER_KEY), and for every OTEL_* variable: OpenTelemetry's
        # specification reads an empty value as unset. (An empty list or string setting keeps its meaning.)
        if isinstance(values, dict):
            return {name: value for name, value in values.items()
                    if not (value == "" and (name.startswith("otel_") or name == "max_live_sessions_per_key"))}
        return values

    @model_validator(mode="after")
    def _bands(self) -> "Settings":
        self.flow_bands = [name.lower() for name in self.flow_bands]
        self.flow_default_band = self.flow_default_band.strip().lower()
        problem = band_problem(self.flow_bands, self.flow_default_band)
        if problem is not None:
            raise ValueError(problem)
        return self

    @field_validator("key_id_secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value():
            return None  # KEY_ID_SECRET= (empty, as compose passes an unset variable): unset
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("KEY_ID_SECRET must be at least 16 characters (e.g. `openssl rand -hex 32`)")
        return value

    @field_validator("public_base_url")
    @classmethod
    def _public_base_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")) or "?" in value or "#" in value:
            raise ValueError("PUBLIC_BASE_URL must be an http:// or https:// URL without a query or fragment, "
                             "the address clients reach the gateway at")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if value and not value.startswith("redis://"):
            raise ValueError("REDIS_URL must be a redis:// URL (redis://[:password@]host[:port][/db])")
        return value

    @field_validator("engine_admin_routes")
    @classmethod
    def _admin_capable(cls, value: list[str]) -> list[str]:
        unknown = [path for path in value if path not in ADMIN_CAPABLE_ROUTES]
        if unknown:
            raise ValueError(f"ENGINE_ADMIN_ROUTES may only name {', '.join(ADMIN_CAPABLE_ROUTES)}; "
                             f"got {', '.join(unknown)}")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        if "*" in value and len(value) > 1:
            raise ValueError("CORS_ORIGINS is either '*' alone (any page) or a list of origins, not both")
        return value if value == ["*"] else [normal_origin(origin) for origin in value]

    @field_validator("vllm_base_url", "vllm_dns_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("vllm_base_url")
    @classmethod
    def _engine_url(cls, value: str) -> str:
        # (VLLM_BASE_URLS and VLLM_DNS_URL are read, with the same rule, by gateway.engines.fleet.)
        if not is_http_url(value):
            raise ValueError("VLLM_BASE_URL must be the engine's http:// or https:// URL (http://HOST:PORT, "
                             "without /v1)")
        return value

    @field_validator("otel_exporter_otlp_traces_endpoint", "otel_exporter_otlp_endpoint")
    @classmethod
    def _collector_url(cls, value: str, info: ValidationInfo) -> str:
        # The exporter would log "Invalid URL" at every export while the gateway ran without traces.
        if value and not is_http_url(value):
            raise ValueError(f"{info.field_name.upper()} must be the collector's http:// or https:// URL "
                             "(e.g. http://collector:4318/v1/traces)")
        return value

    @field_validator("database_url", "sessions_database_url")
    @classmethod
    def _database_url(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.field_name == "sessions_database_url":
            return value  # empty: DATABASE_URL
        try:
            backend = make_url(value).get_backend_name()
        except ArgumentError:
            backend = None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"{info.field_name.upper()} must be a sqlite+aiosqlite:///PATH or "
                             f"postgresql+asyncpg://USER:PASSWORD@HOST/DB URL")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        # Compared with the Host header's name, without its port: "http://devbox" or "devbox:8000" never
        # matched, and every request by that name got 421.
        for name in value:
            if not _HOST_NAME.match(name) and not _is_address(name):
                raise ValueError(f"ALLOWED_HOSTS entries are host names or addresses without a scheme, port or "
                                 f"path (e.g. devbox.internal); got {name!r}")
        return value

    @field_validator("vllm_dns_networks", "webhook_allowed_networks")
    @classmethod
    def _networks(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{info.field_name.upper()} entries are networks like 10.0.0.0/8 or fd00::/8; "
                                 f"got {network!r}")
        return value

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
        return bool(self.api_keys or self.app_api_keys or self.admin_api_keys)

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            yield name, (without_password(value) if name.endswith("database_url") else value)

    @property
    def effective_sessions_database_url(self) -> str:
        return self.sessions_database_url or self.database_url


def without_password(url: str) -> str:
    """A database URL as it may be shown: its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url if "@" not in url else "<a database URL that does not parse>"


_HOST_NAME = re.compile(r"^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?$")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True

_ORIGIN = re.compile(r"^(https?)://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::([0-9]{1,5}))?$")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def normal_origin(origin: str) -> str:
    """An origin as browsers send it in ``Origin``: scheme and host in lower case, no default port.

    Anything else (a path, a trailing slash, a wildcard inside a name, ``null``) is refused with
    the reason, since it could never match and would fail silently.
    """
    if origin == "null":
        raise ValueError("CORS_ORIGINS may not name 'null': sandboxed frames and file: pages all send it, "
                         "so any page could claim it")
    found = _ORIGIN.match(origin)
    if found is None:
        raise ValueError(f"CORS_ORIGINS entries are origins: scheme://host[:port], without a path or a trailing "
                         f"slash (e.g. https://app.example.com); got {origin!r}")
    scheme, host, port = found.group(1).lower(), found.group(2).lower(), found.group(3)
    if port is not None and not 1 <= int(port) <= 65535:
        raise ValueError(f"CORS_ORIGINS: {origin!r} has no valid port")
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{int(port)}"


_BAND_NAME = re.compile(r"^[a-z0-9_-]{1,32}$")


def band_problem(names: list[str] | tuple[str, ...], default: str) -> str | None:
    """What is wrong with FLOW_BANDS and FLOW_DEFAULT_BAND (None: nothing); the one home of the rule."""
    if not names:
        return "FLOW_BANDS must name at least one band"
    for name in names:
        if not _BAND_NAME.match(name):
            return f"FLOW_BANDS: a band name is 1-32 lower-case letters, digits, '_' or '-'; got {name!r}"
    if len(set(names)) != len(names):
        return f"FLOW_BANDS names a band twice: {', '.join(names)}"
    if default not in names:
        return f"FLOW_DEFAULT_BAND must be one of FLOW_BANDS ({', '.join(names)}); got {default!r}"
    return None


def is_http_url(url: str) -> bool:
    """Whether ``url`` is an http:// or https:// URL with a host (and a valid port, if it names one)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises for a port that is no number or out of range)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sqlite_database(url: str) -> str | None:
    """The file of a SQLite URL (``sqlite+aiosqlite:///./data/stack.db`` -> ``./data/stack.db``).

    None for another database, an in-memory SQLite or a URL that does not parse. The one
    reading of a database URL's SQLite file: the session store, the marketplace's database and
    the key-id secret kept beside it all ask here.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return parsed.database

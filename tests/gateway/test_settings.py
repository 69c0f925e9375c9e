"""Settings never show a secret when printed, logged or refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import Settings

KEYS = {"api_keys": "sk-read-0123456789", "app_api_keys": "sk-app-0123456789", "admin_api_keys": "sk-admin-0123456789"}


def test_keys_and_database_passwords_never_show_in_repr_or_str():
    settings = Settings(**KEYS, vllm_api_key="engine-secret-1", key_id_secret="k" * 32,
                        database_url="postgresql+asyncpg://stack:db-password-1@postgres/stack",
                        sessions_database_url="postgresql://stack:db-password-2@postgres/sessions",
                        vllm_base_urls="http://a:8000|engine-secret-2")
    for shown in (repr(settings), str(settings), f"{settings!r}"):
        for secret in [*KEYS.values(), "engine-secret-1", "engine-secret-2", "k" * 32, "db-password-1",
                       "db-password-2"]:
            assert secret not in shown
    assert "postgresql+asyncpg://stack:***@postgres/stack" in repr(settings)  # the rest stays readable
    assert [key.get_secret_value() for key in settings.api_keys] == [KEYS["api_keys"]]  # still usable


def test_comma_separated_keys_from_the_environment_are_secrets(monkeypatch):
    monkeypatch.setenv("API_KEYS", "sk-one-0123456789, sk-two-0123456789")
    settings = Settings()
    assert [key.get_secret_value() for key in settings.api_keys] == ["sk-one-0123456789", "sk-two-0123456789"]
    assert "sk-one" not in repr(settings) and settings.auth_enabled


def test_a_refused_setting_is_named_without_echoing_its_value():
    with pytest.raises(ValidationError) as refused:
        Settings(key_id_secret="short-secret-x")
    assert "key_id_secret" in str(refused.value) and "at least 16 characters" in str(refused.value)
    assert "short-secret-x" not in str(refused.value)
    with pytest.raises(ValidationError) as refused:
        Settings(port="eighty")
    assert "port" in str(refused.value) and "eighty" not in str(refused.value)


def test_no_settings_class_shows_a_database_password():
    from gateway.features import settings_classes

    for cls in settings_classes():
        urls = {name: "postgresql://stack:db-password-3@postgres/x" for name in cls.model_fields
                if name.endswith("database_url")}
        shown = repr(cls(**urls))
        assert "db-password-3" not in shown, cls.__name__


def test_public_base_url_is_an_http_address_kept_without_its_trailing_slash():
    assert Settings(public_base_url="https://gateway.example.com/llm/").public_base_url == \
        "https://gateway.example.com/llm"
    assert Settings(public_base_url="").public_base_url is None
    for wrong in ("gateway.example.com", "ftp://gateway.example.com", "https://gateway.example.com/?a=1"):
        with pytest.raises(ValidationError) as refused:
            Settings(public_base_url=wrong)
        assert "public_base_url" in str(refused.value) and "http:// or https://" in str(refused.value)


def test_an_engine_or_database_url_that_cannot_work_is_refused_by_name():
    for wrong in ("engine-host:8001", "ftp://engine-host:8001", "http://engine-host:80801", "http://"):
        with pytest.raises(ValidationError, match="VLLM_BASE_URL must be the engine's http:// or https:// URL"):
            Settings(vllm_base_url=wrong)
    assert Settings(vllm_base_url="https://engine-host/").vllm_base_url == "https://engine-host"
    for name in ("database_url", "sessions_database_url"):
        for wrong in ("stack.db", "mysql://u@db/stack", "postgres-host/stack"):
            with pytest.raises(ValidationError, match=f"{name.upper()} must be a sqlite"):
                Settings(**{name: wrong})
    assert Settings(sessions_database_url="").effective_sessions_database_url == Settings().database_url


def test_an_empty_variable_whose_default_is_unset_takes_the_default(monkeypatch):
    # NAME= is what compose passes for an unset ${NAME:-}; OpenTelemetry's specification reads it as unset.
    for name in ("MAX_LIVE_SESSIONS_PER_KEY", "OTEL_TRACES_SAMPLER", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                 "OTEL_SDK_DISABLED", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_TRACES_SAMPLER_ARG"):
        monkeypatch.setenv(name, "")
    settings = Settings()
    assert settings.max_live_sessions_per_key is None and settings.otel_traces_sampler is None
    assert settings.otel_exporter_otlp_protocol == "http/protobuf" and settings.otel_exporter_otlp_traces_protocol is None
    assert settings.otel_exporter_otlp_timeout == 5000 and settings.otel_exporter_otlp_traces_timeout is None
    assert settings.otel_sdk_disabled is False and settings.otel_bsp_max_queue_size == 2048
    assert settings.otel_traces_sampler_arg == 1.0
    monkeypatch.setenv("ENGINE_ADMIN_ROUTES", "")  # an empty list keeps its meaning: none
    assert Settings().engine_admin_routes == []


def test_a_collector_url_that_cannot_work_is_refused_by_name():
    for name in ("otel_exporter_otlp_traces_endpoint", "otel_exporter_otlp_endpoint"):
        for wrong in ("collector:4318/v1/traces", "notaurl", "udp://collector:4318"):
            with pytest.raises(ValidationError, match=f"{name.upper()} must be the collector's http"):
                Settings(**{name: wrong})
        assert getattr(Settings(**{name: "https://collector:4318"}), name) == "https://collector:4318"


def test_every_settings_class_refuses_a_database_url_that_cannot_work_by_name():
    # A feature's too (MARKETPLACE_DATABASE_URL=notaurl was a traceback when its lifespan connected).
    from gateway.features import settings_classes

    for cls in settings_classes():
        for name in (name for name in cls.model_fields if name.endswith("database_url")):
            for wrong in ("notaurl", "mysql://u@db/stack"):
                with pytest.raises(ValidationError, match=f"{name.upper()} must be a sqlite"):
                    cls(**{name: wrong})


def test_no_number_setting_takes_infinity():
    # "inf" passed every bound: GRACEFUL_SHUTDOWN_SECONDS=inf or SESSION_FLUSH_INTERVAL=inf started a gateway.
    from gateway.features import settings_classes

    for cls in settings_classes():
        for name, field in cls.model_fields.items():
            if float in (field.annotation, *getattr(field.annotation, "__args__", ())):
                with pytest.raises(ValidationError, match=name):  # ("nan" failed every bound already)
                    cls(**{name: "inf"})


def test_allowed_hosts_are_names_that_can_match_a_host_header():
    # Compared with the Host header's name without its port: these never matched (every request got 421).
    for wrong in ("http://devbox.internal", "devbox.internal:8000", "[::1]", "*.example.com", "cafe:8000"):
        with pytest.raises(ValidationError, match="ALLOWED_HOSTS entries are host names or addresses"):
            Settings(allowed_hosts=wrong)
    assert Settings(allowed_hosts="devbox.internal, 10.0.0.5, fe80::1").allowed_hosts == \
        ["devbox.internal", "10.0.0.5", "fe80::1"]

"""Test helpers and fixture plugins, in one package (test modules import from here, never from a conftest).

Fixture plugins (``pytest_plugins`` in tests/conftest.py): ``servers`` (free ports, an app
under real uvicorn), ``engine`` (the real vLLM engine), ``postgres`` (a real PostgreSQL).
Helpers: ``fake_engine`` (the fake OpenAI upstream), ``gateway`` (the gateway served in
process or on a port, the API keys tests use), ``bodies`` (request bodies for the fake
engine), ``engine_gateway`` (settings, bodies and a metrics probe for the real engine),
``sse_client`` (an SSE reader for session tests), ``gateway_process`` (the gateway as its own
process), ``tcp_proxy`` (a proxy a test can cut), ``codegen_fakes`` (fakes for the code API's
service), ``waiting`` (poll until a condition holds), ``docs`` (the pages of docs/ and their code blocks).
"""

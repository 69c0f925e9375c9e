"""OpenTelemetry traces of the gateway's requests, with the GenAI semantic conventions (docs/tracing.md).

``provider``: ``Tracing``, set up from the settings (off unless an OTLP endpoint is set), its
bounded batch export; ``request``: one request's spans (``RequestTrace``), recorded as plain
values (``spans``) and encoded into the batch processor's queue as they end; ``hooks``: the
one call each place of the request path makes; ``conventions``: the pinned attribute names and what is read from bodies
(counts and parameters, never text); ``otlp_encoding``: a batch of spans as OTLP protobuf
bytes, written directly, for the SDK's HTTP and gRPC exporters (``otlp_http``, ``otlp_grpc``).

Below ``gateway.http`` in the layers: the middleware, the engine client and the relays call
in; this package imports none of them (it is handed a request context, an engine, a router).
"""

"""The SDK's OTLP/HTTP exporter, encoding with ``otlp_encoding`` instead of the proto classes.

Everything else is the SDK's: the endpoint, headers, timeout, compression and TLS settings
(``OTEL_EXPORTER_OTLP_*``), the retries, the exporter's own metrics. Only the step that turns
a batch of finished spans into an ``ExportTraceServiceRequest`` changes: the SDK builds it as
protobuf objects (about 120 us per traced request: two spans, 30 attributes), ``OtlpEncoder``
writes its bytes, or joins those the gateway's spans were encoded to as they ended. ``export``
is the SDK's own (pinned version, constraints.txt) with that step swapped;
tests/gateway/tracing/test_otlp_encoding.py sends through it to a receiver that decodes with
``opentelemetry-proto``. The gRPC one: ``otlp_grpc``.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http._common import RequestPayloadTooLargeError, _is_request_too_large
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import _logger as sdk_logger
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.tracing.otlp_encoding import OtlpEncoder


class HttpExporter(OTLPSpanExporter):
    """OTLP over HTTP/protobuf (``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``, the default)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.encoder = OtlpEncoder()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            sdk_logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                data = self.encoder.encode(spans)
            except Exception as error:  # (the SDK's rule: a batch that cannot be encoded is dropped)
                sdk_logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if _is_request_too_large(data, self._max_request_size):
                sdk_logger.warning("Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                                   len(data), self._max_request_size)
                result.error = RequestPayloadTooLargeError(
                    f"Serialized span request size {len(data)} bytes exceeds max_request_size "
                    f"{self._max_request_size} bytes.")
                return SpanExportResult.FAILURE
            exported = self._client.export(data)
            if not exported.success:
                result.error = exported.error
                if exported.status_code is not None:
                    result.error_attrs = {"http.response.status_code": exported.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

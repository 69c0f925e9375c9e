"""What a batch and a line are: statuses, endpoints, and the records the store returns."""

from __future__ import annotations

from dataclasses import dataclass

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings")
MESSAGES_ENDPOINT = "/v1/messages"  # Anthropic's Message Batches
COMPLETION_WINDOWS = ("24h",)

VALIDATING = "validating"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
FAILED = "failed"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
EXPIRED = "expired"
ACTIVE = (VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING)
ENDED = (COMPLETED, FAILED, CANCELLED, EXPIRED)

# A line's state and, once done, its outcome.
PENDING, RUNNING, DONE = "pending", "running", "done"
SUCCEEDED, ERRORED, LINE_CANCELLED, LINE_EXPIRED = "succeeded", "errored", "cancelled", "expired"

OPENAI, ANTHROPIC = "openai", "anthropic"


class LineStopped(Exception):
    """The line's batch was stopped (cancelled, expired) before the line reached the engine: it never ran."""


@dataclass
class BatchRecord:
    id: str
    owner: str
    api: str
    endpoint: str
    input_file_id: str | None
    completion_window: str
    status: str
    metadata: dict | None
    model: str | None
    errors: list[dict] | None
    output_file_id: str | None
    error_file_id: str | None
    total: int
    completed: int
    failed: int
    input_tokens: int
    output_tokens: int
    created_at: float
    expires_at: float
    in_progress_at: float | None
    finalizing_at: float | None
    completed_at: float | None
    failed_at: float | None
    expired_at: float | None
    cancelling_at: float | None
    cancelled_at: float | None
    ended_as: str | None
    lease_epoch: int
    output_expires_after: float | None = None  # seconds the output and error files live (None: FILES_RETENTION_SECONDS)
    cached_tokens: int = 0     # of input_tokens, summed from the lines' usage
    reasoning_tokens: int = 0  # of output_tokens, the same


@dataclass(frozen=True)
class LineRun:
    """One line on its way to the executor."""

    batch_id: str
    line: int
    custom_id: str
    endpoint: str
    body: bytes
    epoch: int
    attempts: int


@dataclass(frozen=True)
class LineResult:
    """What running a line gave: the HTTP status and JSON body the endpoint answered; ``error``
    (``{"code", "message"}``) when the gateway itself ended the line (a spent budget)."""

    status_code: int
    body: object
    error: dict | None = None


@dataclass(frozen=True)
class Finished:
    """A line's result on its way to the store (``store.record_and_claim``)."""

    run: LineRun
    outcome: str
    status_code: int | None
    response: str | None
    error: str | None = None
    usage: tuple[int, int, int, int] = (0, 0, 0, 0)  # (prompt, completion, cached, reasoning) tokens

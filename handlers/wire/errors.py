"""Client errors as HTTP sees them: a status, a message naming the problem, and a JSON "type".

Domain refusals (handlers.errors) become statuses here and nowhere else.
"""

from __future__ import annotations

from handlers.errors import (
    OutOfRange,
    OverLimit,
    Refused,
    TooCostly,
    TooManyProtectedSpans,
    Unparsable,
    UnsupportedLanguage,
)

STATUS_OF_REFUSAL: dict[type[Refused], int] = {
    OverLimit: 413,
    UnsupportedLanguage: 422,
    OutOfRange: 422,
    TooManyProtectedSpans: 400,
    Unparsable: 400,
    TooCostly: 422,
}


class InvalidRequest(Exception):
    """A client error: carries the HTTP status and a message that names the problem."""

    kind = "InvalidRequest"  # the "type" of the JSON error
    retry_after: int | None = None  # seconds, sent as Retry-After

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class Busy(InvalidRequest):
    """Not the client's fault: this batch already holds all the sentences it may decode."""

    kind = "Busy"
    retry_after = 1

    def __init__(self, queued: int, limit: int) -> None:
        super().__init__(
            f"the server is busy: this batch already holds {queued} sentences "
            f"(max_sentences_per_batch {limit}); retry shortly",
            status=503,
        )


def client_error(refusal: Refused) -> InvalidRequest:
    """The HTTP error for a domain refusal (the most specific kind in the table wins)."""
    for kind in type(refusal).__mro__:
        if kind in STATUS_OF_REFUSAL:
            return InvalidRequest(refusal.message, status=STATUS_OF_REFUSAL[kind])
    raise TypeError(f"no HTTP status for {type(refusal).__name__}") from refusal

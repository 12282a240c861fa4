"""Business errors carry their HTTP status; one handler renders them as RFC 9457 problem+json."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FieldError:
    path: str
    message: str
    severity: str = "error"

    def as_dict(self) -> dict:
        return {"path": self.path, "message": self.message, "severity": self.severity}


@dataclass
class AppError(Exception):
    detail: str
    status: int = 400
    title: str = "Bad request"
    errors: list[FieldError] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.errors:
            return self.detail
        return self.detail + "\n" + "\n".join(f"  {e.path}: {e.message}" for e in self.errors)

    def problem(self, instance: str | None = None) -> dict:
        body = {"type": "about:blank", "title": self.title, "status": self.status, "detail": self.detail}
        if instance:
            body["instance"] = instance
        if self.errors:
            body["errors"] = [e.as_dict() for e in self.errors]
        return body


class NotFound(AppError):
    def __init__(self, detail: str):
        super().__init__(detail=detail, status=404, title="Not found")


class Conflict(AppError):
    def __init__(self, detail: str):
        super().__init__(detail=detail, status=409, title="Conflict")


class Invalid(AppError):
    def __init__(self, detail: str, errors: list[FieldError] | None = None):
        super().__init__(detail=detail, status=422, title="Unprocessable content", errors=errors or [])


class Unavailable(AppError):
    """An upstream (Prometheus) could not answer; the caller records a gap and retries."""

    def __init__(self, detail: str):
        super().__init__(detail=detail, status=503, title="Service unavailable")

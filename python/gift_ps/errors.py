"""GiftError: a failed call to the GIFT service, with the gRPC code's name."""

from typing import Optional


class GiftError(Exception):
    """A Worker API call failed.

    Attributes:
      code: the gRPC status code's name ("FAILED_PRECONDITION",
        "INVALID_ARGUMENT", "UNAVAILABLE", "DEADLINE_EXCEEDED", ...).
      message: the service's message (the daemon's reason).
      method: the call that failed ("PushPull", "RegisterBuffers", ...).
    """

    def __init__(self, code: str, message: str, method: str = ""):
        self.code = code
        self.message = message
        self.method = method
        prefix = f"{method}: " if method else ""
        super().__init__(f"{prefix}{code}: {message}")

    @classmethod
    def from_rpc_error(cls, error: Exception, method: str = "") -> "GiftError":
        """Maps a grpc.RpcError (or any exception) to a GiftError."""
        code = "UNKNOWN"
        message = str(error)
        code_fn = getattr(error, "code", None)
        details_fn = getattr(error, "details", None)
        if callable(code_fn):
            status_code = code_fn()
            name: Optional[str] = getattr(status_code, "name", None)
            if name:
                code = name
        if callable(details_fn):
            details = details_fn()
            if details is not None:
                message = details
        return cls(code, message, method)

"""GiftError: a failed call to the GIFT service, with the gRPC code's name;
RejoinRequired: the worker was (re)admitted at a later step."""

import re
from typing import Optional

# The worker's refusal of a step below its admit step
# (worker/worker_core.h CheckAdmitted).
_ADMITTED = re.compile(r"admitted at step ([0-9]+)")


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
        admitted = _ADMITTED.search(message) if code == "FAILED_PRECONDITION" else None
        if admitted is not None:
            return RejoinRequired(int(admitted.group(1)), message, method)
        return cls(code, message, method)


class RejoinRequired(GiftError):
    """The worker joined the cluster again (its lease expired: the process
    was stopped or cut off) or late, and the coordinator admitted it at
    `admit_step`: it refuses every step below. The others went on without
    it, so this process's parameters are stale. Resynchronise them (load the
    newest checkpoint, docs/operations.md "Rejoining"), then continue the
    loop at admit_step. code is FAILED_PRECONDITION; the message says why the
    lease was lost (evicted at step S, cluster at step T).

    Attributes:
      admit_step: the first step the worker takes part in.
    """

    def __init__(self, admit_step: int, message: str, method: str = ""):
        self.admit_step = admit_step
        super().__init__("FAILED_PRECONDITION", message, method)

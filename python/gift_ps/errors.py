"""GiftError: a failed call to the GIFT service, with the gRPC code's name;
RejoinRequired: the worker was (re)admitted at a later step; MemberLost: a
worker of the job left under the policy on_member_loss fail;
WorldSizeChanged: a step completed in a world of another size than the
previous one (on_member_loss continue)."""

import re
from dataclasses import dataclass
from typing import List, Optional

# The worker's refusal of a step below its admit step
# (worker/daemon/worker_core.h CheckAdmitted).
_ADMITTED = re.compile(r"admitted at step ([0-9]+)")
# The worker's refusal of a step after a worker of the job left under
# on_member_loss fail (worker/daemon/membership_guard.h).
_MEMBER_LOST = "on_member_loss=fail:"


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
        if code == "FAILED_PRECONDITION" and _MEMBER_LOST in message:
            return MemberLost(message, method)
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


class MemberLost(GiftError):
    """A worker of the job left (it stopped, was evicted or lost its lease)
    and the cluster's policy is on_member_loss fail (`giftctl policy set
    --on-member-loss fail`): this step and every later one fail until the
    training processes register their buffers again (a new run, e.g. from
    the newest checkpoint). code is FAILED_PRECONDITION; the message names
    the lost workers (rank, name, member id, node)."""

    def __init__(self, message: str, method: str = ""):
        super().__init__("FAILED_PRECONDITION", message, method)


@dataclass(frozen=True)
class LostWorker:
    """A worker of the previous step's world that is gone (its rank then)."""
    rank: int
    name: str
    member_id: str
    node: str = ""


class WorldSizeChanged(RuntimeWarning):
    """The step completed, but in a world of another size than this
    worker's previous step (policy on_member_loss continue, the default): a
    worker left (lost lists it) or joined. The average in the buffers is
    that of the new world, so the effective batch changed. Raised or warned
    (warnings.warn) as WorkerClient's on_world_size_change says.

    Attributes:
      previous_world_size, world_size: before and now.
      lost: LostWorker of each worker gone (empty when one joined).
      result: the step's PushPullResult (the step itself succeeded).
    """

    def __init__(self, previous_world_size: int, world_size: int,
                 lost: "List[LostWorker]", result=None):
        self.previous_world_size = previous_world_size
        self.world_size = world_size
        self.lost = list(lost)
        self.result = result
        who = ", ".join(f"rank {w.rank} ({w.name}, {w.member_id}"
                        + (f" on {w.node}" if w.node else "") + ")" for w in self.lost)
        step = f"step {result.step}: " if result is not None else ""
        super().__init__(f"{step}world size {previous_world_size} -> {world_size}"
                         + (f"; lost {who}" if who else ""))

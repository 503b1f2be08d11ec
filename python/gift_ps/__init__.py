"""gift_ps: the training-loop client of GIFT-PS.

    from gift_ps import WorkerClient, GradientSync
    client = WorkerClient("/run/gift/worker.sock")   # or "unix:/path", "host:port"
    sync = GradientSync(model, client)                # registers every trainable grad in shm
    ... loss.backward(); res = sync.sync(step); optimizer.step()

Needs torch, grpcio and protobuf (Debian: python3-torch, python3-grpcio,
python3-protobuf) and the generated protos of a build (build/python/gen, or
GIFT_PY_GEN). See docs/clients.md.
"""

from .client import PushPullResult, TensorResult, WorkerClient, WorkerInfo, worker_target
from .ddp_hook import GiftHookState, gift_hook
from .errors import GiftError, LostWorker, MemberLost, RejoinRequired, WorldSizeChanged
from .torch_sync import GradientSync

__all__ = [
    "GiftError",
    "GiftHookState",
    "GradientSync",
    "LostWorker",
    "MemberLost",
    "PushPullResult",
    "RejoinRequired",
    "TensorResult",
    "WorkerClient",
    "WorkerInfo",
    "WorldSizeChanged",
    "gift_hook",
    "worker_target",
]

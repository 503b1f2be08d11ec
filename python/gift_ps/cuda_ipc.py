"""CUDA tensors registered with the worker by CUDA IPC: the worker opens the
allocation holding the tensor and averages it in place in device memory (no
copy through host memory).

What the worker needs (worker.proto SharedBuffer): the cudaIpcMemHandle_t
bytes of the allocation, the tensor's offset from the allocation's base,
its size and the device. torch's storage sharing gives them:
`storage._share_cuda_()` (torch >= 2: `t.untyped_storage()`, torch 1.13:
`t.storage()`) answers (device, handle, storage size in bytes, the storage's
offset in bytes within the allocation (the caching allocator carves storages
out of larger cudaMalloc blocks), ...), and the tensor starts
`t.storage_offset()` elements into its storage.

Contract: the training process synchronizes its stream before a push_pull
(sync_streams); the worker's writes are complete when push_pull returns; the
tensor (hence its allocation) stays alive while it is registered (the
WorkerClient keeps a reference).
"""

import logging
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

logger = logging.getLogger("gift_ps")

# sizeof(cudaIpcMemHandle_t).
CUDA_IPC_HANDLE_BYTES = 64
CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class CudaIpcBuffer:
    """A tensor's place in a CUDA allocation, as SharedBuffer carries it."""
    device: int
    handle: bytes
    offset_bytes: int  # from the allocation's base
    size_bytes: int


def buffer_from_share(share: Sequence, storage_offset: int, element_size: int,
                      numel: int) -> CudaIpcBuffer:
    """The buffer of a contiguous tensor of `numel` elements of
    `element_size` bytes, `storage_offset` elements into a storage whose
    `_share_cuda_()` answered `share` (device, handle, storage bytes, storage
    offset bytes in the allocation, ...). ValueError for a share tuple that is
    too short, an empty handle or one not CUDA_IPC_HANDLE_BYTES long, a
    negative device, or a tensor reaching past its storage."""
    if len(share) < 4:
        raise ValueError(f"a CUDA share tuple has at least 4 fields, not {len(share)}")
    device, handle, storage_bytes, storage_offset_bytes = share[:4]
    if not isinstance(handle, (bytes, bytearray)) or len(handle) != CUDA_IPC_HANDLE_BYTES:
        size = len(handle) if isinstance(handle, (bytes, bytearray)) else handle
        raise ValueError(f"the CUDA IPC handle is {size!r}, not {CUDA_IPC_HANDLE_BYTES} bytes "
                         "(an empty storage cannot be shared)")
    device = int(device)
    if device < 0:
        raise ValueError(f"CUDA device {device} < 0")
    if storage_offset < 0 or element_size < 1 or numel < 1:
        raise ValueError(f"bad tensor geometry: storage offset {storage_offset}, element size "
                         f"{element_size}, {numel} elements")
    begin = storage_offset * element_size
    size = numel * element_size
    if begin + size > int(storage_bytes):
        raise ValueError(f"the tensor's bytes [{begin}, {begin + size}) reach past its storage "
                         f"of {int(storage_bytes)} bytes")
    return CudaIpcBuffer(device=device, handle=bytes(handle),
                         offset_bytes=int(storage_offset_bytes) + begin, size_bytes=size)


def describe(tensor: torch.Tensor) -> CudaIpcBuffer:
    """The CudaIpcBuffer of a contiguous FP32 / BF16 / FP16 CUDA tensor.
    ValueError for a CPU, empty or non-contiguous tensor, TypeError for
    another dtype."""
    if not tensor.is_cuda:
        raise ValueError(f"a tensor on {tensor.device} is not a CUDA tensor")
    if tensor.dtype not in CUDA_DTYPES:
        raise TypeError(f"dtype {tensor.dtype} is not one of {CUDA_DTYPES}")
    if not tensor.is_contiguous() or tensor.numel() == 0:
        raise ValueError("a CUDA tensor registered by IPC must be contiguous and not empty")
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
    return buffer_from_share(storage._share_cuda_(), tensor.storage_offset(),
                             tensor.element_size(), tensor.numel())


def sync_streams(devices: Iterable[torch.device]) -> None:
    """Waits for the work queued on torch's current stream of each device
    (the gradients' writes) before the worker reads the tensors."""
    for device in devices:
        torch.cuda.current_stream(device).synchronize()


def register_gradients(client, params, dtypes, owner: str):
    """Registers one gradient buffer per (name, parameter) of `params` with
    `client`, in `dtypes[name]`: for a CUDA parameter on a device the worker
    opens by IPC (WorkerInfo.cuda_device_count above its index), a zero-filled
    CUDA tensor registered in place (zero copy); otherwise a host
    shared-memory tensor (the copy path). Logs which path runs, once.
    Returns (name -> buffer, the CUDA devices of the direct buffers)."""
    cuda = [(n, p) for n, p in params if p.is_cuda]
    count = client.info().cuda_device_count if cuda else 0
    direct = {n: p for n, p in cuda if p.device.index < count}
    host = {n: tuple(p.shape) for n, p in params if n not in direct}
    with torch.no_grad():
        cuda_tensors = {n: torch.zeros(tuple(p.shape), dtype=dtypes[n], device=p.device)
                        for n, p in direct.items()}
    buffers = client.register(host, dtypes={n: dtypes[n] for n in host},
                              cuda_tensors=cuda_tensors)
    if direct:
        logger.info("%s: %d CUDA gradients registered with the worker by CUDA IPC (zero copy), "
                    "%d through host shared memory", owner, len(direct), len(host))
    elif cuda:
        logger.info("%s: the worker opens no CUDA buffers of these devices (cuda_device_count %d): "
                    "%d CUDA gradients are copied through host shared memory", owner, count,
                    len(cuda))
    return buffers, sorted({p.device for p in direct.values()}, key=str)

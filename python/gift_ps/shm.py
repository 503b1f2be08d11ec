"""Shared memory with the worker: sealed memfds handed over its buffer socket.

A SealedBuffer is anonymous shared memory (os.memfd_create) sized once and
sealed against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW |
F_SEAL_SEAL), mapped read-write here, with zero-copy torch views
(torch.frombuffer). A BufferChannel connects to the worker's buffer socket
(WorkerInfo.buffer_socket, SOCK_SEQPACKET) and hands a SealedBuffer's
descriptor over (SCM_RIGHTS); the worker maps it and answers a handle that
RegisterBuffers and SubmitActivationStats name. Why sealed memfds rather
than named /dev/shm objects: whoever can write a named object can shrink it
later and make the worker fault on its pages; a seal cannot be undone, and a
handed descriptor never names another user's object (worker/intake/shared_buffer.h).

Lifetime: nothing has a name, so nothing needs unlinking. The memory lives
while this process holds a view or the buffer, or the worker maps it. The
worker forgets a channel's handles when the channel closes (its
registrations stay).
"""

import fcntl
import mmap
import os
import socket
import threading
from typing import Optional, Sequence

import torch

HANDOFF_MAGIC = b"GIFT-BUFFER-1"  # worker/intake/buffer_socket.h
RELEASE_PREFIX = b"GIFT-RELEASE-1 "
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class SealedBuffer:
    """A zero-filled memfd of `size_bytes`, sealed and mapped read-write."""

    def __init__(self, size_bytes: int, label: str = "gift-buffer"):
        self._mmap: Optional[mmap.mmap] = None
        self._fd = -1
        if size_bytes <= 0:
            raise ValueError(f"sealed buffer of {size_bytes} bytes")
        self.size_bytes = int(size_bytes)
        self._fd = os.memfd_create(label, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self._fd, self.size_bytes)
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, SEALS)
            self._mmap = mmap.mmap(self._fd, self.size_bytes, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            self.close()
            raise

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("sealed buffer is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def tensor(self, shape: Optional[Sequence[int]] = None, dtype: torch.dtype = torch.float32,
               offset: int = 0, count: int = -1) -> torch.Tensor:
        """A zero-copy view of `count` elements (-1: to the end) at byte
        `offset`, 1-D or with `shape`."""
        if self._mmap is None:
            raise ValueError("sealed buffer is closed")
        if count < 0 and shape is not None:
            count = 1
            for d in shape:
                count *= int(d)
        flat = torch.frombuffer(self._mmap, dtype=dtype, count=count, offset=offset)
        return flat if shape is None else flat.view(tuple(shape))

    def close(self) -> None:
        """Closes the descriptor and drops this object's reference to the
        mapping; memory stays mapped under live tensor views (they reference
        the mmap object). Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._mmap = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"SealedBuffer({self.size_bytes} bytes)"


class HandoffError(Exception):
    """The worker refused a handoff: code is a gRPC status code name."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BufferChannel:
    """A connection to the worker's buffer socket. Thread-safe (hand() calls
    are serialized)."""

    def __init__(self, path: str, timeout: float = 30.0):
        self.path = path
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except OSError as e:
            self._sock.close()
            raise HandoffError("UNAVAILABLE",
                               f"cannot connect to the worker's buffer socket {path}: {e}") from None

    def hand(self, fd: int) -> str:
        """Hands descriptor `fd` to the worker; returns its handle.
        HandoffError with the worker's code when refused."""
        with self._lock:
            try:
                socket.send_fds(self._sock, [HANDOFF_MAGIC], [fd])
                reply = self._sock.recv(512)
            except OSError as e:
                # The worker may have said why before it closed the
                # connection (e.g. its connection cap): report that.
                reply = self._pending_reply()
                if not reply.startswith(b"ERR "):
                    raise HandoffError("UNAVAILABLE", f"buffer socket {self.path}: {e}") from None
        if not reply:
            raise HandoffError("UNAVAILABLE", f"the worker closed buffer socket {self.path}")
        text = reply.decode("utf-8", "replace")
        if text.startswith("OK "):
            return text[3:]
        if text.startswith("ERR "):
            code, _, message = text[4:].partition(" ")
            raise HandoffError(code, message)
        raise HandoffError("INTERNAL", f"unexpected reply {text!r} from {self.path}")

    def _pending_reply(self) -> bytes:
        """A reply already waiting on the socket, or b""."""
        try:
            return self._sock.recv(512, socket.MSG_DONTWAIT)
        except OSError:
            return b""

    def release(self, handle: str) -> None:
        """Tells the worker this client no longer names `handle` (a replaced
        set; registered tensors keep their memory). Best effort: a broken
        connection forgets every handle anyway."""
        with self._lock:
            try:
                self._sock.send(RELEASE_PREFIX + handle.encode())
                self._sock.recv(64)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._sock.close()

"""POSIX shared-memory buffers created by this process, viewed as torch tensors.

A ShmBuffer creates "/dev/shm/<name>" (what shm_open("/<name>") creates on
Linux) with O_CREAT | O_EXCL, sizes it, maps it read-write and hands out
zero-copy torch.float32 views (torch.frombuffer). It unlinks only objects it
created itself, in the process that created them (a forked child never
unlinks its parent's objects): at close(), when garbage collected, or at
interpreter exit (atexit) for buffers still open.

The mapping lives as long as any tensor view of it: close() unlinks the name
at once and drops the buffer's own reference; the memory is unmapped when the
last view is garbage collected (never under a live view).
"""

import atexit
import itertools
import mmap
import os
import re
import threading
import weakref
from typing import Optional, Sequence

import torch

SHM_DIR = "/dev/shm"
_NAME_RE = re.compile(r"^/[A-Za-z0-9._-]{1,250}$")

_counter = itertools.count()
_counter_lock = threading.Lock()
_live: "weakref.WeakSet[ShmBuffer]" = weakref.WeakSet()


def validate_shm_name(name: str) -> None:
    """Raises ValueError unless `name` is one "/name" component of safe characters."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in ("/.", "/.."):
        raise ValueError(
            f"shared-memory name {name!r} must be '/' followed by 1-250 of [A-Za-z0-9._-]")


def next_name_prefix() -> str:
    """A process-unique prefix "/gift-<pid>-p<counter>" for a set of buffers."""
    with _counter_lock:
        counter = next(_counter)
    return f"/gift-{os.getpid()}-p{counter}"


def shm_path(name: str) -> str:
    validate_shm_name(name)
    return os.path.join(SHM_DIR, name[1:])


class ShmBuffer:
    """A shared-memory object this process created, mapped read-write."""

    def __init__(self, name: str, size_bytes: int):
        # Until the object is created, there is nothing of ours to unlink
        # (a failed __init__ still runs __del__).
        self._unlinked = True
        self._mmap: Optional[mmap.mmap] = None
        validate_shm_name(name)
        if size_bytes <= 0:
            raise ValueError(f"shared-memory object {name} of {size_bytes} bytes")
        self.name = name
        self.size_bytes = int(size_bytes)
        self._pid = os.getpid()
        path = shm_path(name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        self._unlinked = False
        try:
            try:
                os.ftruncate(fd, self.size_bytes)
                self._mmap = mmap.mmap(fd, self.size_bytes, mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE)
            except BaseException:
                os.unlink(path)
                self._unlinked = True
                raise
        finally:
            os.close(fd)
        _live.add(self)

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def tensor(self, shape: Optional[Sequence[int]] = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A zero-copy view of the whole buffer, 1-D or with `shape`."""
        if self._mmap is None:
            raise ValueError(f"shared-memory buffer {self.name} is closed")
        flat = torch.frombuffer(self._mmap, dtype=dtype)
        return flat if shape is None else flat.view(tuple(shape))

    def unlink(self) -> None:
        """Removes the name (only in the creating process; idempotent)."""
        if self._unlinked or os.getpid() != self._pid:
            return
        self._unlinked = True
        try:
            os.unlink(shm_path(self.name))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Unlinks the name and drops this object's reference to the mapping.
        The memory is unmapped when the last tensor view of it is gone
        (torch.frombuffer views reference the mmap object; closing the mmap
        explicitly would unmap memory they still point to)."""
        self.unlink()
        self._mmap = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"ShmBuffer({self.name!r}, {self.size_bytes} bytes)"


@atexit.register
def _close_all() -> None:
    for buffer in list(_live):
        try:
            buffer.close()
        except Exception:
            pass

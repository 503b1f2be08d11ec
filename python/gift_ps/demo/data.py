"""The demo's corpus: the King James Bible as bytes, split and batched deterministically.

The text comes from Debian's bible-kjv-text (/usr/lib/bible.data, a compressed
file) through the `bible` reader of the bible-kjv package, or from any plain
text file (--text). The bytes are cut into chunks of CHUNK bytes; every
VAL_EVERY-th chunk is held out for validation, the rest, concatenated, is the
training stream.

Data order: global batch `step` is the `batch` windows whose starts are drawn
by numpy's default_rng([seed, step]) over the training stream; rank r of P
takes windows [r*batch/P, (r+1)*batch/P). So every configuration run with the
same seed sees the same bytes in the same order, whatever its communication.
"""

import hashlib
import os
import shutil
import subprocess

import numpy as np
import torch

CHUNK = 4096
VAL_EVERY = 20
BIBLE_DATA_DIR = "/usr/lib"  # bible-kjv-text's bible.data


class DataError(RuntimeError):
    pass


def read_kjv(bible="bible", data_dir=BIBLE_DATA_DIR):
    """Every verse of the KJV, Genesis 1:1 to Revelation 22:21, as printed by `bible`."""
    exe = shutil.which(bible)
    if exe is None:
        raise DataError(
            f"the bible reader '{bible}' was not found: install Debian's bible-kjv and "
            "bible-kjv-text (scripts/install-deps.sh does), or give a plain text file with --text"
        )
    if not os.path.exists(os.path.join(data_dir, "bible.data")):
        raise DataError(f"{data_dir}/bible.data is missing: install Debian's bible-kjv-text")
    cmd = [exe, "-p", data_dir, "gen1:1-rev22:21"]
    res = subprocess.run(cmd, capture_output=True, check=False)
    if res.returncode != 0 or len(res.stdout) < 1_000_000:
        raise DataError(
            f"{' '.join(cmd)} failed (exit {res.returncode}): {res.stderr.decode(errors='replace')[:400]}"
        )
    return res.stdout, " ".join(cmd)


def load_bytes(text=None, bible="bible", data_dir=BIBLE_DATA_DIR):
    """(bytes, source description) of --text or of the KJV."""
    if text is not None:
        with open(text, "rb") as f:
            return f.read(), text
    return read_kjv(bible, data_dir)


class Corpus:
    """Train/validation split of a byte string and the deterministic batches."""

    def __init__(self, data, context, source=""):
        arr = np.frombuffer(data, dtype=np.uint8)
        n_chunks = (len(arr) + CHUNK - 1) // CHUNK
        if n_chunks < 2 * VAL_EVERY or len(arr) < 40 * (context + 1):
            raise DataError(f"the text ({source or 'given'}) has only {len(arr)} bytes; too little for context {context}")
        train, val = [], []
        for i in range(n_chunks):
            (val if i % VAL_EVERY == VAL_EVERY - 1 else train).append(arr[i * CHUNK : (i + 1) * CHUNK])
        self.train = np.concatenate(train)
        self.val = np.concatenate(val)
        self.context = context
        self.source = source
        self.digest = hashlib.sha256(data).hexdigest()[:16]

    def describe(self):
        return (
            f"{len(self.train) + len(self.val)} bytes from {self.source} (sha256 {self.digest}): "
            f"{len(self.train)} train, {len(self.val)} validation (every {VAL_EVERY}th {CHUNK}-byte chunk)"
        )

    def _windows(self, stream, starts):
        chunk = np.stack([stream[s : s + self.context + 1] for s in starts]).astype(np.int64)
        t = torch.from_numpy(chunk)
        return t[:, :-1], t[:, 1:]

    def global_starts(self, seed, step, batch):
        rng = np.random.default_rng([seed, step])
        return rng.integers(0, len(self.train) - self.context - 1, size=batch)

    def shard(self, seed, step, batch, rank, world):
        """(inputs, targets) of rank `rank`'s share of global batch `step`."""
        if batch % world:
            raise ValueError(f"global batch {batch} is not a multiple of the world size {world}")
        per = batch // world
        starts = self.global_starts(seed, step, batch)[rank * per : (rank + 1) * per]
        return self._windows(self.train, starts)

    def validation(self, n_windows, batch, seed=12345):
        """A fixed list of validation batches (the same for every run)."""
        rng = np.random.default_rng([seed, 0xFA1])
        starts = rng.integers(0, len(self.val) - self.context - 1, size=n_windows)
        return [self._windows(self.val, starts[i : i + batch]) for i in range(0, n_windows, batch)]

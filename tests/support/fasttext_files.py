"""Small fastText classifiers the tests write themselves, in fastText 0.9's own file layout:
lid.176's dictionary (its words and labels) with seeded random dense rows, a bucket count of their
own and the loss asked for, so that fastText's engine and the cached one can be compared on models
that are neither quantized nor pruned, and with losses other than the hierarchical softmax."""

from __future__ import annotations

import os
import struct

import numpy as np

from pipeline.prepare.clean.web.fasttext_file import read_fasttext_file
from support.multilingual_text import lid_model

_MAGIC, _VERSION = 793712314, 12
LOSSES = {"hs": 1, "ns": 2, "softmax": 3, "ova": 4}


def dense_model(
    directory: str,
    loss: str = "softmax",
    word_ngrams: int = 1,
    bucket: int = 20_011,
    seed: int = 0,
) -> str:
    """A dense (`.bin`) classifier with lid.176's words and labels and random rows."""
    lid = read_fasttext_file(lid_model())
    rng = np.random.default_rng(seed)
    words = sorted(lid.words, key=lid.words.get)
    rows = rng.normal(0.0, 0.5, (len(words) + bucket, lid.dim)).astype("<f4")
    output = rng.normal(0.0, 1.0, (len(lid.labels), lid.dim)).astype("<f4")
    path = os.path.join(directory, f"{loss}-{word_ngrams}-{seed}.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<2i", _MAGIC, _VERSION))
        # dim, ws, epoch, minCount, neg, wordNgrams, loss, model, bucket, minn, maxn, lrUpdateRate
        args = (lid.dim, 5, 5, 1, 5, word_ngrams, LOSSES[loss], 3, bucket, lid.minn, lid.maxn, 100)
        f.write(struct.pack("<12id", *args, 1e-4))
        f.write(
            struct.pack("<3i2q", len(words) + len(lid.labels), len(words), len(lid.labels), 0, -1)
        )
        counts = [1000] * len(words) + list(lid.label_counts)
        for i, text in enumerate(words + lid.labels):
            f.write(text.encode("utf-8", "surrogateescape") + b"\0")
            f.write(struct.pack("<qb", counts[i], 0 if i < len(words) else 1))
        f.write(struct.pack("<?", False))
        f.write(struct.pack("<2q", *rows.shape) + rows.tobytes())
        f.write(struct.pack("<?", False))
        f.write(struct.pack("<2q", *output.shape) + output.tobytes())
    return path

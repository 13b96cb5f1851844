"""`common_ngrams.jsonl`: the eval n-grams too common in the corpus to count as contamination.

An n-gram found in more documents than `--decontaminate-max-matches` removes nothing (a licence or a
page footer that an eval passage happens to quote). Each line names one, in words as they are
compared (case-folded), with the number of documents holding it and the first eval file holding it,
most common first, so a user sees what the rule let through.
"""

from __future__ import annotations

import json

import numpy as np

from pipeline.dataset import storage
from pipeline.prepare.clean.decontamination.eval_sets import EvalSet, ngram_texts
from schemas import formats
from schemas.prepare_config import PrepareConfig


def common_ngrams_report(
    output_dir: str, config: PrepareConfig, evals: EvalSet, indices: np.ndarray, counts: np.ndarray
) -> None:
    common = counts > config.decontaminate_max_matches
    indices, counts = indices[common], counts[common]
    texts = ngram_texts(
        tuple(config.decontaminate),
        config.decontaminate_ngram,
        config.separator,
        set(evals.hashes[indices].tolist()),
    )
    lines = sorted(
        (
            {
                "ngram": texts[int(evals.hashes[i])],
                "documents": int(n),
                "eval_file": config.decontaminate[int(evals.files[i])],
            }
            for i, n in zip(indices.tolist(), counts.tolist())
        ),
        key=lambda line: (-line["documents"], line["ngram"]),
    )
    with storage.atomic_local_file(storage.join(output_dir, formats.COMMON_NGRAMS_NAME)) as scratch:
        with open(scratch, "w") as out:
            out.writelines(
                json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines
            )

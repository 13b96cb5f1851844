"""The SentencePiece backend's short documents against the library's own batch encode, in one run.

Models trained here (a Llama-like BPE and a T5-like Unigram, 4000 pieces, on 3000 stories), then
4000 stories encoded by `SentencePieceProcessor.encode(texts, num_threads=1)` and by the backend's
`encode_documents` (one batch call of the library, then the boundary ids joined in), in CPU seconds
(`time.process_time`, which the machine's load moves far less than wall time), best of `--rounds`.

    python benchmarks/sentencepiece_speed.py [--rounds 3] [--check]

The goal: the backend within 1.25x the library's time (`--check` exits 1 otherwise).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # `support`: the models the tests train

from cpu_time import fewest_cpu_seconds  # noqa: E402

from pipeline.corpus import stories  # noqa: E402
from pipeline.tokenization.sentencepiece_backend import SentencePieceTokenizer  # noqa: E402
from support.sentencepiece_files import train_model  # noqa: E402

GOAL = 1.25


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check", action="store_true", help=f"exit 1 above {GOAL}x the library")
    args = parser.parse_args()
    texts = list(stories(4000, seed=21))
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    worst = 0.0
    for name in ("bpe_llama_like", "unigram_default"):
        tokenizer = SentencePieceTokenizer(
            train_model(name, 4000, stories=3000), bos_flag=None, eos_flag=None
        )
        library = fewest_cpu_seconds(
            args.rounds, functools.partial(tokenizer.sp.encode, num_threads=1), texts
        )
        backend = fewest_cpu_seconds(args.rounds, tokenizer.encode_documents, texts)
        worst = max(worst, backend / library)
        print(
            f"{name}: {megabytes:.2f} MB of {len(texts)} documents; library "
            f"{megabytes / library:.2f} MB per CPU-s, backend {megabytes / backend:.2f} MB per "
            f"CPU-s ({backend / library:.2f}x the library's time; goal: at most {GOAL})"
        )
    if args.check and worst > GOAL:
        sys.exit(1)


if __name__ == "__main__":
    main()

"""The run's tokenizer, saved in the workdir: sampling needs the run alone, not its data.

`tokenizer.json` holds the manifest's `TokenizerInfo` and `load_as`, the name or `.tiktoken` path
that `prepare` was given; the encoding is loaded from it and must hash to the saved vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tiktoken

from pipeline.tokenizer import load_encoding, vocab_sha256
from schemas.manifest import Manifest, TokenizerInfo

TOKENIZER_NAME = "tokenizer.json"
# What decides the token ids; the name and tiktoken's version may differ for the same vocabulary.
_IDENTITY = ("vocab_sha256", "n_vocab", "eot_id")


@dataclasses.dataclass(frozen=True)
class RunTokenizer:
    info: TokenizerInfo
    load_as: str

    def __post_init__(self) -> None:
        if not self.load_as:
            raise ValueError("a run's tokenizer needs the name or path to load it by (got an empty load_as)")

    @classmethod
    def of(cls, manifest: Manifest) -> RunTokenizer:
        return cls(manifest.tokenizer, manifest.config.tokenizer)

    def same_ids(self, other: RunTokenizer) -> bool:
        return all(getattr(self.info, k) == getattr(other.info, k) for k in _IDENTITY)


def read_run_tokenizer(workdir: str) -> RunTokenizer | None:
    path = os.path.join(workdir, TOKENIZER_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    return RunTokenizer(TokenizerInfo(**data["info"]), data["load_as"])


def check_run_tokenizer(workdir: str, tokenizer: RunTokenizer) -> None:
    """Refuses data whose tokens mean something else than the saved run's."""
    saved = read_run_tokenizer(workdir)
    if saved is not None and not saved.same_ids(tokenizer):
        raise ValueError(
            f"the data's tokenizer ({tokenizer.info.name}, vocabulary {tokenizer.info.vocab_sha256[:12]}) is not "
            f"the run's ({saved.info.name}, vocabulary {saved.info.vocab_sha256[:12]}) in {workdir}; "
            "train on data prepared with the run's tokenizer, or use another --workdir"
        )


def write_run_tokenizer(workdir: str, tokenizer: RunTokenizer) -> None:
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, TOKENIZER_NAME)
    with open(path + ".tmp", "w") as f:
        json.dump(dataclasses.asdict(tokenizer), f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def load_run_encoding(workdir: str) -> tuple[tiktoken.Encoding, TokenizerInfo]:
    """The run's encoding, checked against the saved vocabulary hash."""
    saved = read_run_tokenizer(workdir)
    if saved is None:
        raise ValueError(f"{workdir} has no {TOKENIZER_NAME}; train in it first (runs save their tokenizer)")
    encoding = load_encoding(saved.load_as)
    found = vocab_sha256(encoding)
    if found != saved.info.vocab_sha256:
        raise ValueError(
            f"tokenizer {saved.load_as!r} now has vocabulary {found[:12]}, not the run's "
            f"{saved.info.vocab_sha256[:12]} ({workdir}/{TOKENIZER_NAME}); restore the tokenizer file the run was trained with"
        )
    return encoding, saved.info

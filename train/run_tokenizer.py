"""The run's tokenizer, saved in the workdir: sampling needs the run alone, not its data.

`tokenizer.json` holds the manifest's `TokenizerInfo`, `load_as` (a tiktoken name, or the path,
relative to the workdir, of a copy of the tokenizer's files in `tokenizer/`) and the boundary tokens
in effect. The copy is made when the run starts, from the copy the prepared directory keeps
(`pipeline.tokenization.dataset_copy`), and must hash to the saved identity whenever it is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import os

from etils import epath

from pipeline.tokenization import Tokenizer, load_tokenizer
from pipeline.tokenization.boundaries import NO_BOS
from pipeline.tokenization.dataset_copy import copy_spec
from schemas.manifest import Manifest, TokenizerInfo
from train.errors import TrainError

TOKENIZER_NAME = "tokenizer.json"
COPY_DIR = "tokenizer"
# What decides the token ids; the name and library versions may differ for the same vocabulary.
_IDENTITY = ("vocab_sha256", "n_vocab", "eot_id", "bos_id")


@dataclasses.dataclass(frozen=True)
class RunTokenizer:
    info: TokenizerInfo
    load_as: str
    bos_token: str | None = None
    eos_token: str | None = None

    def __post_init__(self) -> None:
        if not self.load_as:
            raise ValueError(
                "a run's tokenizer needs the name or path to load it by (got an empty load_as)"
            )

    @classmethod
    def of(cls, manifest: Manifest, data_dir: str) -> RunTokenizer:
        """The tokenizer of a prepared directory, loaded from the copy it keeps (checked here, so a
        directory that lacks it is refused before the run starts)."""
        config = manifest.config
        spec = copy_spec(data_dir, manifest, lambda path: epath.Path(path).read_bytes())
        return cls(manifest.tokenizer, spec, config.bos_token, config.eos_token)

    def same_ids(self, other: RunTokenizer) -> bool:
        return all(getattr(self.info, k) == getattr(other.info, k) for k in _IDENTITY)

    def load(self, workdir: str) -> Tokenizer:
        """The tokenizer, checked against the saved identity."""
        path = os.path.join(workdir, self.load_as)
        tokenizer = load_tokenizer(
            path if os.path.exists(path) else self.load_as,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        found = tokenizer.info.vocab_sha256
        if found != self.info.vocab_sha256:
            raise TrainError(
                f"tokenizer {self.load_as!r} now has identity {found[:12]}, not the run's "
                f"{self.info.vocab_sha256[:12]} ({workdir}/{TOKENIZER_NAME}); restore the "
                "tokenizer the run was trained with"
            )
        return tokenizer


def read_run_tokenizer(workdir: str) -> RunTokenizer | None:
    path = os.path.join(workdir, TOKENIZER_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    return RunTokenizer(TokenizerInfo(**data.pop("info")), **data)


def check_run_tokenizer(workdir: str, tokenizer: RunTokenizer) -> None:
    """Refuses data whose tokens mean something else than the saved run's."""
    saved = read_run_tokenizer(workdir)
    if saved is not None and not saved.same_ids(tokenizer):
        raise TrainError(
            f"the data's tokenizer ({tokenizer.info.name}, identity "
            f"{tokenizer.info.vocab_sha256[:12]}) is not the run's ({saved.info.name}, identity "
            f"{saved.info.vocab_sha256[:12]}) in {workdir}; train on data prepared with the run's "
            "tokenizer, or use another --workdir"
        )


def write_run_tokenizer(workdir: str, tokenizer: RunTokenizer) -> None:
    """Saves a copy of the data's tokenizer with the run, once: a resumed run keeps its copy.

    Data whose tokenizer does not load with its identity (ids written without a tokenizer) trains
    all the same; its record names the data's spec, and `sample` refuses it with the reason. A
    prepared directory that lacks its tokenizer files was refused before (`RunTokenizer.of`).
    """
    if read_run_tokenizer(workdir) is not None:
        return
    try:
        loaded = tokenizer.load(workdir)
    except ValueError:
        record = tokenizer
    else:
        load_as = loaded.save(os.path.join(workdir, COPY_DIR))
        record = RunTokenizer(
            tokenizer.info,
            os.path.relpath(load_as, workdir) if os.path.isabs(load_as) else load_as,
            loaded.boundary.bos_token or NO_BOS,
            loaded.boundary.eos_token,
        )
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, TOKENIZER_NAME)
    with open(path + ".tmp", "w") as f:
        json.dump(dataclasses.asdict(record), f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def load_run_tokenizer(workdir: str) -> tuple[Tokenizer, TokenizerInfo]:
    """The run's tokenizer, checked against the saved identity."""
    saved = read_run_tokenizer(workdir)
    if saved is None:
        raise TrainError(
            f"{workdir} has no {TOKENIZER_NAME}; train in it first (runs save their tokenizer)"
        )
    return saved.load(workdir), saved.info

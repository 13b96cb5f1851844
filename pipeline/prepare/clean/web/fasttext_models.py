"""fastText models as the web filters take them: a local file, or a Hugging Face Hub file pinned to
a commit (`hf:ORG/NAME/FILE[@REVISION]`), fetched only because the user named it.

The engine is `fasttext-predict`: fastText's own C++ prediction code in small wheels for every
platform, where `fasttext` itself ships only a source archive that every worker would compile. It
cannot train, which prepare never does. A model is checked before any unit runs: its header must be
fastText's (magic and version) and a supervised model's (a classifier: lid.176, GlotLID, DCLM's
quality classifiers), and the labels a run names must be among its labels. Each process loads a
model once.
"""

from __future__ import annotations

import functools
import os
import re
import struct

from pipeline.hub_commits import commit_of
from pipeline.prepare.clean.judgments import FilterError
from pipeline.prepare.clean.web.cached_fasttext import CachedClassifier, supported
from pipeline.prepare.clean.web.fasttext_file import read_fasttext_file
from schemas.prepare_config import PrepareConfig

HUB_PREFIX = "hf:"
LABEL_PREFIX = "__label__"
ENGINE_HINT = "install the filters extra: pip install -e '.[filters]' (fasttext-predict)"
# fastText's file header: magic and version, then its arguments as int32s; `model` is the 8th
# (1 cbow, 2 skipgram, 3 supervised).
_MAGIC, _VERSION = 793712314, 12
_HEADER = struct.Struct("<10i")
_SUPERVISED = 3
_KINDS = {1: "a cbow word-vector model", 2: "a skipgram word-vector model"}
_HUB_SPEC = re.compile(
    rf"{HUB_PREFIX}(?P<repo>[^/@\s]+/[^/@\s]+)/(?P<file>[^@\s]+?)(?:@(?P<revision>[^@\s]+))?"
)


def _hub_parts(spec: str) -> tuple[str, str, str | None]:
    match = _HUB_SPEC.fullmatch(spec)
    if match is None:
        raise FilterError(
            f"a hub model is {HUB_PREFIX}ORG/NAME/FILE or {HUB_PREFIX}ORG/NAME/FILE@REVISION "
            f"(got {spec!r})"
        )
    return match["repo"], match["file"], match["revision"]


def _hub_error(spec: str, error: Exception) -> FilterError:
    return FilterError(
        f"hub model {spec!r} cannot be had: {type(error).__name__}: {error}".split("\n")[0]
    )


def pinned(spec: str) -> str:
    """A hub spec with its revision resolved to the commit it names now (`main` when none), so that
    every worker and a rerun read the same bytes; a local path made absolute."""
    if not spec.startswith(HUB_PREFIX):
        return os.path.abspath(spec)
    repo, file, revision = _hub_parts(spec)
    try:
        sha = commit_of(repo, revision)
    except Exception as e:  # the client's errors: not found, gated, unreachable, not installed
        raise _hub_error(spec, e) from None
    return f"{HUB_PREFIX}{repo}/{file}@{sha}"


def model_specs(config: PrepareConfig) -> list[str]:
    """The fastText models a run's filters load, as its config names them."""
    specs = [config.language_model] if "language" in config.filters else []
    if "fasttext" in config.filters:
        specs.append(str(config.filter_params.get("fasttext", {}).get("model_url", "")))
    return [spec for spec in specs if spec]


@functools.cache
def local_path(spec: str) -> str:
    """Where a model is on this machine: the path itself, or the pinned hub file in the Hugging
    Face cache (`HF_HOME`), fetched there on first use."""
    if not spec.startswith(HUB_PREFIX):
        return spec
    repo, file, revision = _hub_parts(spec)
    try:
        from huggingface_hub import hf_hub_download

        return hf_hub_download(repo, file, revision=revision)
    except Exception as e:
        raise _hub_error(spec, e) from None


def check_header(path: str) -> None:
    """Refuses what is not a fastText classifier, from its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
    except OSError as e:
        raise FilterError(f"fastText model {path} cannot be read ({e.strerror or e})") from None
    if len(head) < _HEADER.size or _HEADER.unpack(head)[:2] != (_MAGIC, _VERSION):
        raise FilterError(
            f"{path} is not a fastText model (a .bin or .ftz file of fastText 0.9, such as "
            "lid.176.bin or GlotLID's model_v3.bin)"
        )
    kind = _HEADER.unpack(head)[9]
    if kind != _SUPERVISED:
        raise FilterError(
            f"{path} is {_KINDS.get(kind, f'a fastText model of kind {kind}')}, not a classifier: "
            "the filters need a supervised model"
        )


class FastTextModel:
    """A loaded classifier: its labels, without `__label__`, and every label's probability for a
    batch of one-line texts."""

    def __init__(self, path: str):
        check_header(path)
        try:
            from fasttext.FastText import _FastText
        except ImportError:
            raise FilterError(
                f"the fastText filters need fasttext-predict; {ENGINE_HINT}"
            ) from None
        try:
            self._model = _FastText(path)
        except (ValueError, RuntimeError, MemoryError) as e:
            raise FilterError(f"fastText model {path} cannot be loaded ({e})") from None
        # Every label, whatever its probability: what a run may name.
        labels, _ = self._model.predict("", k=-1, threshold=-1.0)
        self.labels = tuple(sorted(label[len(LABEL_PREFIX) :] for label in labels))

    def check_labels(self, wanted: list[str], what: str) -> None:
        missing = sorted(set(wanted) - set(self.labels))
        if missing:
            shown = ", ".join(self.labels[:20]) + (", ..." if len(self.labels) > 20 else "")
            raise FilterError(
                f"{what} {missing} are not labels of the model (its {len(self.labels)} labels: "
                f"{shown})"
            )

    def predict(self, line: str, k: int = -1, threshold: float = 0.0):
        """fastText's own `predict`: its labels and their probabilities, best first."""
        return self._model.predict(line, k=k, threshold=threshold)

    def scores(self, line: str) -> dict[str, float]:
        """Each label's probability for one line of text, as fastText predicts with `k=-1` (labels
        it gives no probability above 0 are left out, as its default threshold does)."""
        labels, probabilities = self.predict(line)
        return {label[len(LABEL_PREFIX) :]: p for label, p in zip(labels, probabilities)}


@functools.cache
def load(spec: str) -> FastTextModel:
    """The model a spec names, loaded once per process."""
    return FastTextModel(local_path(spec))


@functools.cache
def load_cached(spec: str) -> CachedClassifier | None:
    """The model a spec names in the cached engine (see `cached_fasttext`), once per process; None
    where that engine does not predict as fastText does for it."""
    path = local_path(spec)
    try:
        model = read_fasttext_file(path)
    except (OSError, ValueError) as e:
        raise FilterError(f"fastText model {path} cannot be read ({e})") from None
    return CachedClassifier(model) if supported(model) is None else None

"""datatrove's `LanguageFilter`, judged by a fastText language identifier (lid.176, GlotLID).

Its rule: the text, newlines read as spaces, is scored for every label (`k=-1`); the best label is
the document's `language`, its probability the `language_score`. With `languages` given, a document
is kept when its score for one of them is above `language_threshold` (strictly); with `languages`
None (datatrove's PR #226), when its best score is; with `label_only`, always. A wanted language
that is not a label of the model is refused before any unit runs (datatrove would score it 0).

A batch of texts is scored by the cached engine (`cached_fasttext`: fastText's rules, each distinct
word's rows summed once per process), with fastText's own engine where that one does not cover the
model, and where a threshold below `_SAFE_PRUNING` makes fastText's pruning of the labels under
1e-5 decide.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.prepare.clean.judgments import FilterError, Judged
from pipeline.prepare.clean.quality.word_chunks import without_surrogates
from pipeline.prepare.clean.web.cached_fasttext import CachedClassifier
from pipeline.prepare.clean.web.fasttext_models import (
    LABEL_PREFIX,
    FastTextModel,
    load,
    load_cached,
    pinned,
)


@dataclasses.dataclass
class LanguageRule:
    """datatrove's keyword arguments and defaults (the model is `--language-model`)."""

    # A rule of the chain over whole texts, whose words it does not need (see `fast_filters`).
    web = True
    needs_words = False

    languages: list[str] | str | None = None
    language_threshold: float = 0.65
    label_only: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.languages, str):
            self.languages = [self.languages]
        self._model: FastTextModel | None = None
        self._cached: CachedClassifier | None = None
        self._wanted = frozenset(LABEL_PREFIX + language for language in self.languages or ())

    def use(self, language_model: str | None) -> None:
        """Loads the model (once per process) and checks the languages asked for are its labels."""
        if not language_model:
            raise FilterError(
                "--filter language needs a language identifier: --language-model PATH or "
                "hf:ORG/NAME/FILE (fastText's lid.176.bin or .ftz, GlotLID's model_v3.bin)"
            )
        spec = pinned(language_model)
        self._model = load(spec)
        if self.languages:
            self._model.check_labels(list(self.languages), "languages")
        if not self._wanted or not 0 <= self.language_threshold < _SAFE_PRUNING:
            self._cached = load_cached(spec)

    def check(self, text: str) -> None:
        self.judge([text])

    def judge(self, texts: list[str]) -> list[Judged]:
        """Per text: whether it is kept, the text (unchanged) and its language notes."""
        if self._cached is None:
            return [self._judge(text) for text in texts]
        probabilities = self._cached.probabilities(texts)
        labels = self._cached.labels
        best = probabilities.argmax(axis=1)
        scores = probabilities[np.arange(len(texts)), best]
        threshold = self.language_threshold
        if not self._wanted:
            kept = scores > threshold
        else:
            wanted = [i for i, label in enumerate(labels) if LABEL_PREFIX + label in self._wanted]
            kept = (probabilities[:, wanted] > threshold).any(axis=1)
        return [
            Judged(
                bool(keep) or self.label_only,
                text,
                {"language": labels[label], "language_score": float(score)},
            )
            for text, keep, label, score in zip(
                texts, kept.tolist(), best.tolist(), scores.tolist()
            )
        ]

    def _judge(self, text: str) -> Judged:
        # fastText finds its best label without scoring every one (its hierarchical softmax walks
        # only the branches that can beat it), with the probability `k=-1` gives it: that decides
        # all but a document whose best language is not wanted yet above the threshold.
        line = without_surrogates(text.replace("\n", " "))
        labels, scores = self._model.predict(line, k=1)
        best, score = labels[0], scores[0]
        threshold = self.language_threshold
        if not self._wanted:
            kept = score > threshold
        elif threshold < 0:  # a language fastText leaves out scores 0, above it
            kept = True
        elif best in self._wanted or score <= threshold:  # no other label scores above the best
            kept = best in self._wanted and score > threshold
        else:  # another label may be above the threshold too: those that can be, best first
            labels, scores = self._model.predict(line, threshold=_pruned_below(threshold))
            kept = any(label in self._wanted for label in _above(labels, scores, threshold))
        return Judged(
            kept or self.label_only,
            text,
            {"language": best[len(LABEL_PREFIX) :], "language_score": score},
        )


# fastText leaves out the labels whose log-probability is below log(threshold + 1e-5): asked for
# half the threshold, it keeps every label above the threshold itself, whatever the rounding.
_SAFE_PRUNING = 1e-3


def _pruned_below(threshold: float) -> float:
    return threshold / 2 if threshold > _SAFE_PRUNING else 0.0


def _above(labels: tuple[str, ...], scores: tuple[float, ...], threshold: float):
    for label, score in zip(labels, scores):
        if score <= threshold:
            return
        yield label

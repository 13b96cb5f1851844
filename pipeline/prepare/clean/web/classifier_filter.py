"""datatrove's `FastTextClassifierFilter`: any fastText classifier (DCLM's `fasttext-oh-eli5`,
FineWeb-Edu-style labels), by its rules.

Each part of a document (the whole of it by default: `filter_mode`) is stripped, its newlines
replaced by `newline_replacement`, and scored for every label; a part is kept when one of
`keep_labels` scores at least its threshold, or, with `remove_labels`, when none of them does (with
neither, every part). The document keeps its kept parts, joined, and is removed when they are blank.
Labels are named without `__label__`; one the model lacks is refused before any unit runs.
"""

from __future__ import annotations

import dataclasses

from pipeline.prepare.clean.judgments import FilterError, Judged
from pipeline.prepare.clean.web.fasttext_models import FastTextModel, load, pinned

# datatrove's `split_into_parts` modes (datatrove.utils.text).
MODES = ("DOCUMENT", "PARAGRAPH", "SENTENCE", "WORDS")


def _pairs(labels: list | tuple | None) -> list[tuple[str, float]]:
    """datatrove's forms: one `(label, score)` or a list of them (JSON's lists)."""
    if not labels:
        return []
    if isinstance(labels[0], str):
        labels = [labels]
    try:
        return [(str(label), float(score)) for label, score in labels]
    except (TypeError, ValueError):
        raise FilterError(
            f'labels are ["LABEL", SCORE] or a list of them, e.g. [["hq", 0.5]] (got {labels!r})'
        ) from None


@dataclasses.dataclass
class ClassifierRule:
    """datatrove's keyword arguments and defaults; `model_url` a path or hf:ORG/NAME/FILE."""

    # A rule of the chain over whole texts, whose words it does not need (see `fast_filters`).
    web = True
    needs_words = False

    model_url: str = ""
    keep_labels: list | None = None
    remove_labels: list | None = None
    save_labels_in_metadata: bool = True
    newline_replacement: str = ""
    filter_mode: str = "DOCUMENT"

    def __post_init__(self) -> None:
        if self.keep_labels and self.remove_labels:
            raise FilterError("fasttext takes keep_labels or remove_labels, not both")
        if self.filter_mode not in MODES:
            raise FilterError(
                f"fasttext.filter_mode must be one of {MODES} (got {self.filter_mode!r})"
            )
        self._keep, self._remove = _pairs(self.keep_labels), _pairs(self.remove_labels)
        self._model: FastTextModel | None = None

    def pinned(self) -> str:
        if not self.model_url:
            raise FilterError(
                "--filter fasttext needs its model: --filter-param fasttext.model_url=PATH or "
                "hf:ORG/NAME/FILE"
            )
        return pinned(self.model_url)

    def use(self, language_model: str | None) -> None:
        """Loads the model (its own `model_url`, once per process) and checks the labels asked for
        are its labels."""
        self._model = load(self.pinned())
        self._model.check_labels([label for label, _ in self._keep + self._remove], "labels")

    def _keeps(self, scores: dict[str, float]) -> bool:
        if self._keep:
            return any(scores.get(label, -9e9) >= least for label, least in self._keep)
        return not any(scores.get(label, -9e9) >= least for label, least in self._remove)

    def check(self, text: str) -> None:
        self.judge([text])

    def judge(self, texts: list[str]) -> list[Judged]:
        from datatrove.utils.text import split_into_parts

        judged = []
        for text in texts:
            kept = []
            for part in split_into_parts(text, mode=self.filter_mode):
                line = part.strip().replace("\n", self.newline_replacement)
                if self._keeps(self._model.scores(line)):
                    kept.append(part)
            text = "".join(kept)
            judged.append(Judged(bool(text.strip()), text, {}))
        return judged

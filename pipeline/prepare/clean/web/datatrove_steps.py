"""The web filters in the exact mode (`--filter-impl datatrove`): datatrove's own `LanguageFilter`,
`FastTextClassifierFilter` and `PIIFormatter`, given the run's model files.

datatrove downloads its models on first use; here their loading is given the model the run names
(see `fasttext_models`), wrapped to answer as `fasttext`'s `_FastText` does (probabilities as a
numpy array, `labels`), so their rules run as written. PII's formatter is made afresh for each
document (see `pii`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.prepare.clean.web.classifier_filter import ClassifierRule
from pipeline.prepare.clean.web.fasttext_models import LABEL_PREFIX, FastTextModel, load, pinned
from pipeline.prepare.clean.web.language_filter import LanguageRule

WEB_NAMES = ("language", "fasttext", "pii")


class _AsFastText:
    """A loaded model as datatrove calls fasttext's `_FastText`."""

    def __init__(self, model: FastTextModel):
        self._model = model
        self.labels = [LABEL_PREFIX + label for label in model.labels]

    def predict(self, text: str, k: int = 1, threshold: float = 0.0):
        labels, probabilities = self._model.predict(text, k=k, threshold=threshold)
        return labels, np.asarray(probabilities)


class _PIIStep:
    """datatrove's `PIIFormatter`, one per document, as a step that keeps every document."""

    def __init__(self, params: Mapping[str, Any]):
        from datatrove.pipeline.formatters import PIIFormatter

        self._make = lambda: PIIFormatter(**params)
        self._make()  # its parameters checked before any unit runs

    def filter(self, document) -> bool:
        document.text = self._make().format(document.text)
        return True


def _built(cls: type, params: Mapping[str, Any]):
    """A datatrove step made without its dependency check, which asks for the distribution
    `fasttext-numpy2-wheel` by name where fasttext-predict installs the same `fasttext` module."""
    step = object.__new__(cls)
    step.__init__(**params)
    return step


def datatrove_step(name: str, params: Mapping[str, Any], language_model: str | None):
    """datatrove's object for a web filter, its model (where it has one) the run's."""
    if name == "pii":
        return _PIIStep(params)
    if name == "language":
        from datatrove.pipeline.filters import LanguageFilter

        LanguageRule(**params).use(language_model)  # the model and languages checked
        step = _built(LanguageFilter, params)
        step.model._model = _AsFastText(load(pinned(language_model)))
        return step
    from datatrove.pipeline.filters import FastTextClassifierFilter

    rule = ClassifierRule(**params)
    rule.use(language_model)
    step = _built(FastTextClassifierFilter, params)
    step._model = _AsFastText(load(rule.pinned()))
    return step

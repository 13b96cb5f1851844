"""The cached engine scores as fastText's own: the same best label and every label's probability to
its rounding, on the language identifier the tests ship (quantized, pruned, hierarchical softmax)
and on dense models the tests write (softmax, hierarchical softmax), over held-out multilingual and
varied text and texts that fastText reads in its own ways. A text's scores are its own, whatever
batch it is in and whatever the cache holds; models the engine does not cover are left to
fastText."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from fasttext.FastText import _FastText

from pipeline.prepare.clean.judgments import FilterError
from pipeline.prepare.clean.quality.quality_filters import check_filters, quality_filters
from pipeline.prepare.clean.quality.word_chunks import without_surrogates
from pipeline.prepare.clean.web.cached_fasttext import CachedClassifier, supported
from pipeline.prepare.clean.web.fasttext_file import read_fasttext_file
from pipeline.prepare.clean.web.fasttext_models import load_cached
from support.fasttext_files import dense_model
from support.multilingual_text import lid_model, multilingual_documents
from support.varied_text import varied_documents

EDGE_TEXTS = [
    "",
    "   ",
    "x",
    "stops at </s> and reads nothing after it",
    "</s>",
    "a</s>b is one word",
    "__label__en is no word, nor is __label__xx",
    "tabs\tand\vvertical\ftabs\rcarriage\x00returns and nul",
    "no-break\xa0space, ideographic\u3000space and \x1cseparators join words",
    "emoji 😀😀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 take four bytes",
    "combining e\u0301, Ωμέγα, Привет мир and 日本語のテキスト",
    "a" * 300 + " long words are hashed otherwise " + "é" * 250,
    "lone \ud800 surrogate, scored as U+FFFD",
    "line one\nline two\n\nline four",
]


@functools.cache
def _texts() -> list[str]:
    return [*multilingual_documents()[:400], *varied_documents(3, 150), *EDGE_TEXTS]


def _fasttext_probabilities(path: str, texts: list[str], labels: list[str]) -> np.ndarray:
    """fastText's own probability of every label (a negative threshold prunes none)."""
    model = _FastText(path)
    found = np.zeros((len(texts), len(labels)))
    column = {label: i for i, label in enumerate(labels)}
    for row, text in enumerate(texts):
        line = without_surrogates(text.replace("\n", " "))
        for label, p in zip(*model.predict(line, k=-1, threshold=-1.0)):
            found[row, column[label.removeprefix("__label__")]] = p
    return found


@pytest.fixture(scope="module", params=["lid.176.ftz", "softmax", "hs"])
def model_path(request, tmp_path_factory) -> str:
    if request.param == "lid.176.ftz":
        return lid_model()
    return dense_model(str(tmp_path_factory.mktemp("models")), loss=request.param)


def test_the_cached_engine_scores_every_label_as_fasttext_does(model_path):
    texts = _texts()
    engine = CachedClassifier(read_fasttext_file(model_path))
    found = np.concatenate(
        [engine.probabilities(texts[i : i + 97]) for i in range(0, len(texts), 97)]
    )
    expected = _fasttext_probabilities(model_path, texts, engine.labels)
    # fastText adds float32 rows one at a time; the cached engine sums in float64.
    np.testing.assert_allclose(found, expected, rtol=1e-4, atol=1e-6)
    top_two = np.sort(expected, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 1e-4 * top_two[:, 1]  # not a tie to rounding
    assert clear.mean() > 0.9
    assert (found.argmax(axis=1)[clear] == expected.argmax(axis=1)[clear]).all()


def test_a_text_s_scores_are_its_own_whatever_its_batch_and_the_cache(model_path):
    texts = _texts()
    model = read_fasttext_file(model_path)
    together = CachedClassifier(model).probabilities(texts)
    warmed = CachedClassifier(model)
    warmed.probabilities(varied_documents(11, 200))
    alone = np.stack([warmed.probabilities([text])[0] for text in reversed(texts)])[::-1]
    assert np.array_equal(together, alone)

    class Small(CachedClassifier):
        MAX_BYTES = 64 * model.dim * 8  # starts afresh every batch or so
        resets = 0

        def _reset(self) -> None:
            Small.resets += 1
            super()._reset()

    small = Small(model)
    batches = [small.probabilities(texts[i : i + 7]) for i in range(0, len(texts), 7)]
    assert Small.resets > len(texts) // 14 and np.array_equal(together, np.concatenate(batches))


def test_a_line_ends_at_fasttext_s_end_of_line_token():
    engine = CachedClassifier(read_fasttext_file(lid_model()))
    cut, whole, before = engine.probabilities(
        [
            "bonjour </s> hello world this is english",
            "bonjour hello world this is english",
            "bonjour",
        ]
    )
    assert np.array_equal(cut, before) and not np.array_equal(cut, whole)


@pytest.mark.parametrize(
    "kind, why",
    [
        ({"loss": "ova"}, "its loss"),
        ({"loss": "ns"}, "its loss"),
        ({"loss": "softmax", "word_ngrams": 2}, "word n-grams"),
    ],
)
def test_models_the_cached_engine_does_not_cover_are_scored_by_fasttext(tmp_path, kind, why):
    path = dense_model(str(tmp_path), **kind)
    assert why in supported(read_fasttext_file(path))
    assert load_cached(path) is None
    texts = multilingual_documents()[:200]
    params = {"language": {"languages": ["en", "fr"], "language_threshold": 0.0001}}
    _, notes = quality_filters(["language"], params, "fast", path).judge_noted(texts)
    model = _FastText(path)
    expected = [model.predict(text.replace("\n", " "), k=1) for text in texts]
    assert [(n["language"], n["language_score"]) for n in notes] == [
        (labels[0].removeprefix("__label__"), scores[0]) for labels, scores in expected
    ]


@pytest.mark.parametrize("damage", ["cut", "extended"])
def test_a_model_file_that_ends_early_or_runs_on_is_refused(tmp_path, damage):
    path = tmp_path / "model.bin"
    data = open(dense_model(str(tmp_path)), "rb").read()
    path.write_bytes(data[:-100] if damage == "cut" else data + b"\0" * 8)
    with pytest.raises(ValueError, match="ends before" if damage == "cut" else "runs on"):
        read_fasttext_file(str(path))
    with pytest.raises(FilterError, match="model.bin"):
        check_filters(["language"], {}, "fast", str(path))

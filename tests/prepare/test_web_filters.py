"""The web filters decide as datatrove's: language ID as fastText's own prediction with datatrove's
rule on held-out multilingual text, and language ID, fastText classifiers and PII as datatrove's
own objects given the same model file; a model that cannot be used is refused in one line."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from fasttext.FastText import _FastText

from pipeline.prepare.clean.judgments import FilterError
from pipeline.prepare.clean.quality.quality_filters import check_filters, quality_filters
from support.multilingual_text import lid_model, multilingual_documents, skipgram_model, with_pii

DOCUMENTS = multilingual_documents()


@functools.cache
def _fasttext() -> _FastText:
    return _FastText(lid_model())


def _datatrove_language_rule(text: str, languages: list[str] | None, threshold: float):
    """fastText's own prediction, then datatrove's `LanguageFilter` rule: kept, label, score."""
    labels, scores = _fasttext().predict(text.replace("\n", " "), k=-1)
    pairs = {label.split("__")[2]: score for label, score in zip(labels, scores)}
    best, score = max(pairs.items(), key=lambda pair: pair[1])
    if languages:
        kept = any(pairs.get(language, 0.0) > threshold for language in languages)
    else:
        kept = score > threshold
    return kept, best, score


@pytest.mark.slow  # the agreement runs: some 20 s in all
@pytest.mark.parametrize(
    "languages, threshold",
    [
        (["en"], 0.65),
        (["fr", "de", "es", "ru"], 0.5),
        (None, 0.65),
        (["de", "en"], 0.0),
        (["en"], -1.0),
    ],
)
def test_language_id_keeps_what_fasttext_with_datatrove_s_rule_keeps(languages, threshold):
    params = {"language": {"languages": languages, "language_threshold": threshold}}
    judged, notes = quality_filters(["language"], params, "fast", lid_model()).judge_noted(
        DOCUMENTS
    )
    expected = [_datatrove_language_rule(text, languages, threshold) for text in DOCUMENTS]
    agree = sum((why is None) == kept for (why, _), (kept, _, _) in zip(judged, expected))
    assert agree / len(DOCUMENTS) >= 0.999
    assert [n["language"] for n in notes] == [label for _, label, _ in expected]
    # fastText adds float32 rows one at a time, the cached engine sums in float64 (see
    # `cached_fasttext`): the scores agree to their rounding.
    scores = [score for _, _, score in expected]
    assert [n["language_score"] for n in notes] == pytest.approx(scores, rel=1e-4)
    # A negative threshold keeps all: datatrove scores a language fastText leaves out 0.
    assert {why for why, _ in judged} == ({None} if threshold < 0 else {None, "filter:language"})


class _NumpyFastText(_FastText):
    """fasttext's `_FastText` as datatrove calls it: probabilities as numpy arrays, and `labels`."""

    @property
    def labels(self):
        return list(super().predict("", k=-1, threshold=-1.0)[0])

    def predict(self, text, k=1, threshold=0.0):
        labels, probabilities = super().predict(text, k=k, threshold=threshold)
        return labels, np.asarray(probabilities)


@pytest.fixture
def datatrove_with_local_models(monkeypatch):
    """datatrove's classes loading the local lid.176.ftz wherever they would download a model."""
    import fasttext.FastText
    from datatrove.pipeline import base
    from datatrove.pipeline.filters import fasttext_filter
    from datatrove.utils import lid

    local = lambda *args, **kwargs: lid_model()  # noqa: E731
    monkeypatch.setattr(lid, "cached_asset_path_or_download", local)
    monkeypatch.setattr(fasttext_filter, "cached_asset_path_or_download", local)
    monkeypatch.setattr(fasttext.FastText, "_FastText", _NumpyFastText)
    # datatrove asks for fasttext's module by the distribution fasttext-numpy2-wheel.
    monkeypatch.setattr(base, "check_required_dependencies", lambda *args: None)
    monkeypatch.setattr(lid, "check_required_dependencies", lambda *args: None)


RUNS = [
    ("language", {"languages": ["en", "fr"]}),
    ("language", {"language_threshold": 0.8}),
    ("fasttext", {"keep_labels": [["en", 0.5]]}),
    ("fasttext", {"remove_labels": [["fr", 0.3], ["de", 0.3]]}),
    ("fasttext", {"keep_labels": [["en", 0.4]], "filter_mode": "PARAGRAPH"}),
    ("pii", {}),
    ("pii", {"only_remove_public_ips": False, "email_replacement": "<email>"}),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, params", RUNS)
def test_the_web_filters_decide_as_datatrove_s_objects(datatrove_with_local_models, name, params):
    from datatrove.data import Document
    from datatrove.pipeline.filters import FastTextClassifierFilter, LanguageFilter
    from datatrove.pipeline.formatters import PIIFormatter

    documents = with_pii(DOCUMENTS)
    if name == "fasttext":
        params = {**params, "model_url": lid_model()}
    if name != "pii":
        step = (LanguageFilter if name == "language" else FastTextClassifierFilter)(**params)
    expected = []
    for text in documents:
        document = Document(text=text, id="")
        if name == "pii":  # one formatter per document: its replacements' turns start afresh
            expected.append((None, PIIFormatter(**params).format(text)))
            continue
        kept = step.filter(document)
        expected.append((None, document.text) if kept else (f"filter:{name}", text))
    for impl in ("fast", "datatrove"):
        judged = quality_filters([name], {name: params}, impl, lid_model()).judge_many(documents)
        assert judged == expected, impl
    assert len({why for why, _ in expected}) == (1 if name == "pii" else 2)
    if name == "pii":
        assert sum(kept != text for (_, kept), text in zip(expected, documents)) > 100


IP_LIKE = [
    "version 1.2.3.4.5 and pi 3.14, then 1.1.1",
    "1.1.1.1",
    "256.1.1.1 and 1.256.1.1 and 01.002.3.4",
    "a1.2.3.4b and 8.8.8.8.8.8.8.8",
    "x 0.0.0.0 y 255.255.255.255x",
    "10.0.0.1 192.168.1.1 172.16.0.5 100.64.0.1 127.0.0.1",
    "١.٢.٣.٤ and １.２.３.４ are no addresses",
    "1.2.3.\n4 and 9.9.9.9",
    "no digits here. None at all.",
    "1.2.3.4",
]


@pytest.mark.parametrize("params", [{}, {"only_remove_public_ips": False}])
def test_pii_replaces_ip_like_text_as_datatrove_s_formatter(params):
    from datatrove.pipeline.formatters import PIIFormatter

    judged = quality_filters(["pii"], {"pii": params}, "fast").judge_many(IP_LIKE)
    assert judged == [(None, PIIFormatter(**params).format(text)) for text in IP_LIKE]
    assert sum(kept != text for (_, kept), text in zip(judged, IP_LIKE)) >= 5


def test_pii_s_replacements_depend_on_the_document_alone():
    documents = with_pii(DOCUMENTS)[:60]
    filters = quality_filters(["pii"], {}, "fast")
    together = filters.judge_many(documents)
    assert [filters.judge_many([text])[0] for text in documents] == together
    _, notes = filters.judge_noted(["a@b.org and c@d.org from 8.8.8.8 and 10.0.0.1"])
    assert notes == [{"emails": 2, "ips": 1}]


@pytest.mark.parametrize(
    "case, message",
    [
        ("no model", "--filter language needs a language identifier"),
        ("missing", "cannot be read"),
        ("not fastText", "is not a fastText model"),
        ("skipgram", "is a skipgram word-vector model, not a classifier"),
        ("no such language", "languages ['xx'] are not labels of the model"),
        ("no such label", "labels ['hq'] are not labels of the model"),
        ("both label kinds", "keep_labels or remove_labels, not both"),
    ],
)
def test_a_model_that_cannot_be_used_is_refused_in_one_line(tmp_path, case, message):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a model\n" * 10)
    names, params, model = ["language"], {}, lid_model()
    if case == "no model":
        model = None
    elif case in ("missing", "not fastText", "skipgram"):
        model = {
            "missing": str(tmp_path / "lid.176.bin"),
            "not fastText": str(text_file),
            "skipgram": skipgram_model(str(tmp_path)),
        }[case]
    elif case == "no such language":
        params = {"language": {"languages": ["en", "xx"]}}
    else:
        names = ["fasttext"]
        labels = {"keep_labels": [["hq", 0.5]]}
        if case == "both label kinds":
            labels["remove_labels"] = [["en", 0.5]]
        params = {"fasttext": {"model_url": lid_model(), **labels}}
    for impl in ("fast", "datatrove"):
        with pytest.raises(FilterError, match=message.replace("[", r"\[")) as raised:
            check_filters(names, params, impl, model)
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize("threshold", [0.65, 0.0])  # the cached engine, and fastText's own
def test_a_lone_surrogate_is_scored_as_u_fffd_by_either_engine(threshold):
    texts = ["Ceci est un texte \ud800 en français, écrit pour le test.", "plain \udfff"]
    params = {"language": {"languages": ["fr"], "language_threshold": threshold}}
    judged, notes = quality_filters(["language"], params, "fast", lid_model()).judge_noted(texts)
    expected = [
        _datatrove_language_rule(
            text.replace("\ud800", "\ufffd").replace("\udfff", "\ufffd"), ["fr"], threshold
        )
        for text in texts
    ]
    assert [why is None for why, _ in judged] == [kept for kept, _, _ in expected]
    assert [n["language"] for n in notes] == [label for _, label, _ in expected]
    assert [n["language_score"] for n in notes] == pytest.approx(
        [s for _, _, s in expected], rel=1e-4
    )
    assert [text for _, text in judged] == texts  # the text itself is kept as it was

"""Quality filters: datatrove's Gopher quality, Gopher repetition, C4 and FineWeb rules, run on each
whole document of a unit, by one of two implementations (`--filter-impl`):

- `fast` (the default, `fast_filters`): the rules written for speed over batches of documents,
  each distinct whitespace chunk split by spaCy once per process. The same decisions as datatrove's
  on all but a sliver of documents (docs/filters.md says which), at several times its speed;
- `datatrove` (`datatrove_filters`): datatrove's own classes, whose decisions are datatrove's to
  the document, at its speed.

Both take datatrove's parameters (the keyword arguments of its classes, with its defaults), give
its reasons, `filter:NAME:REASON` (`filter:NAME` where datatrove gives none), and keep the text as
its filters leave it (datatrove's C4 drops lines without terminal punctuation, or about javascript
or cookies): the kept text is the one deduplicated and tokenized (see `unit_fingerprints`).

Only English: datatrove's English word tokenizer is spaCy's blank pipeline, which needs no model,
while other languages' tokenizers fetch models (nltk, stanza) at run time.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pipeline.prepare.clean.judgments import INSTALL_HINT, FilterError, Filters
from pipeline.prepare.clean.quality.datatrove_filters import DatatroveFilters
from pipeline.prepare.clean.quality.fast_filters import RULES, FastFilters
from pipeline.prepare.clean.quality.spacy_import import import_spacy
from schemas.prepare_config import ALL_FILTER_NAMES, FILTER_IMPLS

CHECK_DOCUMENT = "A check of the filters' parameters."


def _rules(name: str) -> type:
    if name not in ALL_FILTER_NAMES:
        raise FilterError(f"unknown filter {name!r}; expected one of {sorted(ALL_FILTER_NAMES)}")
    return RULES[name]


def parameters(name: str) -> dict[str, Any]:
    """The settable keyword arguments of a filter, with datatrove's defaults (its class's)."""
    return {f.name: f.default for f in dataclasses.fields(_rules(name))}


# Every number a filter takes is a count, a length, a ratio or a threshold, never below 0, but for
# datatrove's C4 parameters that -1 turns off (its docstring's "set to -1 to disable").
OFF_BY_MINUS_ONE = {"c4": ("min_num_sentences", "min_words_per_line", "max_word_length")}


def check_ranges(params: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuses a parameter's number that no document could be judged by (`max_avg_word_length=-3`
    removes every document, `min_num_sentences=-5` none), before anything is read; its type and
    name are checked with the filters themselves (`check_filters`)."""
    for name, values in params.items():
        for key, value in values.items():
            off = key in OFF_BY_MINUS_ONE.get(name, ())
            if any(x < 0 and not (off and x == -1) for x in _numbers(value)):
                allowed = "-1 (off) or at least 0" if off else "at least 0"
                raise FilterError(f"--filter-param {name}.{key} must be {allowed}, got {value!r}")


def _numbers(value: Any) -> Iterator[int | float]:
    """The numbers in a parameter's value, in its lists too (`top_n_grams`' pairs)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def parse_parameter(text: str) -> tuple[str, str, Any]:
    """`NAME.KEY=VALUE` as `(name, key, value)`; VALUE is read as JSON (`30`, `0.2`, `false`,
    `null`, `["a","b"]`), else taken as a string."""
    target, sep, raw = text.partition("=")
    name, dot, key = target.partition(".")
    if not sep or not dot or not name or not key:
        raise FilterError(
            "a filter parameter is NAME.KEY=VALUE, e.g. gopher-quality.min_doc_words=30 (got "
            f"{text!r})"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return name, key, value


def quality_filters(
    names: Sequence[str],
    params: Mapping[str, Mapping[str, Any]],
    impl: str,
    language_model: str | None = None,
) -> Filters:
    """The run's filters, by the implementation asked for (one of FILTER_IMPLS), with the language
    identifier of `--filter language`."""
    if impl not in FILTER_IMPLS:
        raise FilterError(f"unknown filter implementation {impl!r}; expected one of {FILTER_IMPLS}")
    missing = [name for name in ("datatrove", "spacy") if importlib.util.find_spec(name) is None]
    if missing:
        raise FilterError(
            f"--filter needs datatrove and spaCy (no module named {missing[0]!r}); {INSTALL_HINT}"
        )
    if impl == "datatrove":
        return DatatroveFilters(names, params, language_model)
    return FastFilters(names, params, language_model)


def preload(impl: str) -> None:
    """Loads what the filters of an implementation judge with: spaCy's English pipeline (the fast
    filters' own copy, or datatrove's), whose import takes most of a second."""
    if impl == "fast":
        from pipeline.prepare.clean.quality.word_cache import english

        english()
    else:
        from datatrove.utils.typeshelper import Languages
        from datatrove.utils.word_tokenizers import load_word_tokenizer

        import_spacy()  # without torch, before datatrove imports it (see `spacy_import`)
        _ = load_word_tokenizer(Languages.english).tokenizer  # built on first use


def check_filters(
    names: list[str],
    params: Mapping[str, Mapping[str, Any]],
    impl: str,
    language_model: str | None = None,
) -> None:
    """Refuses unknown filters and parameters, parameters of filters not asked for, values the
    filters do not take, and models that cannot be used (missing, unreadable, of another kind,
    without the labels asked for), before any unit runs."""
    if len(set(names)) != len(names):
        raise FilterError(f"a filter is named twice (got {names=})")
    for name in names:
        _rules(name)
    for name, values in params.items():
        if name not in names:
            raise FilterError(
                f"parameters given for {name!r}, which is not in --filter "
                f"{','.join(names) or '(none)'}"
            )
        known = parameters(name)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise FilterError(
                f"{name} has no parameters {unknown}; its parameters: {', '.join(sorted(known))}"
            )
    try:
        filters = quality_filters(names, params, impl, language_model)
    except (TypeError, ValueError) as e:
        if isinstance(e, FilterError):
            raise
        raise FilterError(
            f"the filters refuse their parameters ({type(e).__name__}: {e})"
        ) from None
    if impl == "fast":
        filters.check(CHECK_DOCUMENT)
    else:
        filters.judge_many([CHECK_DOCUMENT])

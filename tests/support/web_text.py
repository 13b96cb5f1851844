"""Web-like text of the kinds quality filters judge: prose, menus, boilerplate, repeated lines,
code, bullets, ellipses, very short and very long documents. What the filter tests and benchmark run
on.

Sentences are drawn from a small English vocabulary with its stop words, so prose passes the
Gopher, C4 and FineWeb rules while the other kinds fail one rule or another.
"""

from __future__ import annotations

import random

STOP = ["the", "of", "and", "to", "with", "that", "have", "be", "a", "in", "is", "it"]
CONTENT = [
    "river",
    "garden",
    "window",
    "morning",
    "teacher",
    "library",
    "journey",
    "kitchen",
    "music",
    "village",
    "ancient",
    "quietly",
    "remember",
    "question",
    "answer",
    "bright",
    "station",
    "letter",
    "mountain",
    "story",
]


def sentence(rng: random.Random) -> str:
    words = [
        rng.choice(STOP if rng.random() < 0.45 else CONTENT) for _ in range(rng.randint(6, 16))
    ]
    return words[0].capitalize() + " " + " ".join(words[1:]) + rng.choice([".", ".", "!", "?"])


def prose(rng: random.Random, paragraphs: int) -> str:
    return "\n".join(
        " ".join(sentence(rng) for _ in range(rng.randint(1, 5))) for _ in range(paragraphs)
    )


def held_out_documents(seed: int = 0, count: int = 220) -> list[str]:
    """`count` documents, the kinds in turn."""
    rng = random.Random(seed)
    kinds = [
        lambda: prose(rng, rng.randint(3, 12)),
        lambda: prose(rng, rng.randint(3, 8)) + "\nThis site uses cookies.\nHome | About | Contact",
        lambda: "\n".join(
            rng.sample(["Home", "About us", "Products", "Contact", "Login", "Blog", "Careers"], 5)
        ),
        lambda: (sentence(rng) + "\n") * rng.randint(3, 30),
        lambda: "\n".join(
            f"def f{i}(x):\n    return {{'v': x * {i}}}" for i in range(rng.randint(2, 20))
        ),
        lambda: "\n".join("- " + sentence(rng) for _ in range(rng.randint(3, 12))),
        lambda: "\n".join(sentence(rng)[:-1] + "..." for _ in range(rng.randint(3, 10))),
        lambda: prose(rng, 4) + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        lambda: rng.choice(["Short.", "ok", "Buy now!", "the the the"]),
        lambda: (
            prose(rng, rng.randint(12, 25))
            + "\nRead more\nShare | Tweet\n"
            + prose(rng, rng.randint(12, 25))
        ),  # KBs
        lambda: " ".join(["word"] * rng.randint(600, 1500)),
    ]
    return [kinds[i % len(kinds)]() for i in range(count)]

"""The embedded default corpus: seeded TinyStories-style stories.

Small, simple English over a closed vocabulary of characters, places, objects and events, so a tiny
model learns it in minutes on a CPU. Written in the TinyStories file format: documents separated
by a line `<|endoftext|>`. The generator uses its own `random.Random(seed)`, so the same seed
gives the same bytes on any machine.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Iterator

from pipeline.cli.arguments import CommandParser
from pipeline.cli.commands import HelpFormatter
from pipeline.tokenization.tiktoken_backend import ENDOFTEXT
from schemas.errors import RunError, SettingError

NAMES = ("Lily", "Tom", "Mia", "Ben", "Sue", "Max", "Anna", "Sam", "Lucy", "Tim", "Zoe", "Jack")
ANIMALS = ("cat", "dog", "bird", "bunny", "frog", "duck", "puppy", "kitten", "fox", "bear")
PLACES = ("park", "garden", "forest", "beach", "farm", "house", "school", "lake", "hill", "town")
OBJECTS = ("ball", "kite", "box", "hat", "cake", "toy", "book", "flower", "boat", "drum")
COLORS = ("red", "blue", "big", "small", "shiny", "yellow", "green", "soft", "happy", "little")
FEELINGS = ("happy", "sad", "scared", "excited", "angry", "tired", "proud", "surprised")
WEATHER = ("sunny", "rainy", "windy", "cold", "warm", "snowy")
RELATIVES = ("mom", "dad", "grandma", "grandpa", "sister", "brother", "friend", "teacher")

OPENINGS = (
    "Once upon a time, there was a {adj} {animal} named {name}.",
    "One day, a little {person} named {name} went to the {place}.",
    "There was once a {adj} {animal} who lived near the {place}.",
    "It was a {weather} day. {name} wanted to play outside.",
)
MIDDLES = (
    "{Pro} found a {adj2} {object} under a tree.",
    "{Pro} saw a {animal2} that looked {feeling}.",
    "{Pro} wanted to show the {object} to {pos} {relative}.",
    'The {animal2} said, "Can I play with you?"',
    "{name} and the {animal2} played with the {object} all day.",
    "Then the wind blew the {object} away, and {name} felt {feeling}.",
    "{Pro} ran to the {place2} to look for the {object}.",
    '{Pos} {relative} said, "Be careful, {name}!"',
    "{name} shared the {object} with the {animal2}.",
    "They laughed and sang a song about the {weather} day.",
)
ENDINGS = (
    "In the end, {name} was {feeling2} and went home to sleep.",
    "From that day on, {name} and the {animal2} were best friends.",
    "{name} learned that sharing makes everyone happy.",
    "{Pos} {relative} gave {obj} a big hug, and they all smiled.",
    'The sun went down, and {name} said, "This was the best day ever!"',
)


def story(rng: random.Random) -> str:
    female = rng.random() < 0.5
    pro, pos, obj = ("she", "her", "her") if female else ("he", "his", "him")
    slots = {
        "name": rng.choice(NAMES),
        "animal": rng.choice(ANIMALS),
        "animal2": rng.choice(ANIMALS),
        "person": "girl" if female else "boy",
        "place": rng.choice(PLACES),
        "place2": rng.choice(PLACES),
        "object": rng.choice(OBJECTS),
        "adj": rng.choice(COLORS),
        "adj2": rng.choice(COLORS),
        "feeling": rng.choice(FEELINGS),
        "feeling2": rng.choice(FEELINGS[:1] + FEELINGS[4:]),
        "weather": rng.choice(WEATHER),
        "relative": rng.choice(RELATIVES),
        "Pro": pro.capitalize(),
        "Pos": pos.capitalize(),
        "pos": pos,
        "obj": obj,
    }
    sentences = [rng.choice(OPENINGS)]
    sentences += rng.sample(MIDDLES, rng.randint(3, 6))
    sentences.append(rng.choice(ENDINGS))
    paragraphs, current = [], []
    for sentence in sentences:
        current.append(sentence.format(**slots))
        if len(current) >= 3 and rng.random() < 0.4:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def stories(num_stories: int, seed: int) -> Iterator[str]:
    if num_stories < 0:
        raise SettingError("num_stories", num_stories, "must be at least 0")
    rng = random.Random(seed)
    for _ in range(num_stories):
        yield story(rng)


def write_corpus(path: str, num_stories: int, seed: int = 0) -> None:
    """One story per document, each followed by a separator line, as TinyStories ships them."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for text in stories(num_stories, seed):
            f.write(text)
            f.write(f"\n{ENDOFTEXT}\n")


def parser(prog: str = "tokshards corpus") -> argparse.ArgumentParser:
    p = CommandParser(
        prog=prog,
        description="Write the embedded TinyStories-style corpus.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--output", required=True, help="text file to write")
    p.add_argument(
        "--stories", dest="num_stories", type=int, default=50_000, help="how many stories"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="the same seed writes the same bytes on any machine"
    )
    return p


def main(argv: list[str] | None = None, prog: str = "tokshards corpus") -> int:
    args = parser(prog).parse_args(argv)
    try:
        write_corpus(args.output, args.num_stories, args.seed)
    except OSError as e:
        raise RunError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"wrote {args.num_stories} stories to {args.output}", file=sys.stderr)
    return 0

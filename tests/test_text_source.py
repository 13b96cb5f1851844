"""The text source's separator split: the plain-split fast path must cut exactly where the regex does."""

from __future__ import annotations

import itertools

from pipeline.prepare.sources.base import separator_regex, split_at_separator_lines

SEP = "<|endoftext|>"
LINES = [
    "Once upon a time.",
    SEP,
    f"  {SEP}  ",
    f"{SEP}\r",
    f"a {SEP} inside a line",
    "",
    "The end.",
]


def _regex_split(data: bytes) -> list[bytes]:
    return separator_regex(SEP).split(b"\n" + data + b"\n")


def test_fast_split_cuts_where_the_regex_cuts():
    for lines in itertools.product(LINES, repeat=4):
        data = "\n".join(lines).encode()
        fast = split_at_separator_lines(data, SEP)
        assert [p.strip() for p in fast] == [p.strip() for p in _regex_split(data)], lines


def test_plain_separator_lines_take_the_fast_path():
    data = f"one\n{SEP}\ntwo\n{SEP}\nthree".encode()
    # The fast path keeps no leading newline on the pieces; the regex keeps the one after a cut.
    assert split_at_separator_lines(data, SEP) == [b"\none", b"two", b"three\n"]
    assert _regex_split(data) == [b"\none", b"\ntwo", b"\nthree\n"]

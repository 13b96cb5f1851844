"""The embedded corpus: same seed, same bytes; in the TinyStories file format."""

from __future__ import annotations

from pipeline.corpus import main, stories, write_corpus


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    write_corpus(str(tmp_path / "a.txt"), 200, seed=7)
    write_corpus(str(tmp_path / "b.txt"), 200, seed=7)
    write_corpus(str(tmp_path / "c.txt"), 200, seed=8)
    a = (tmp_path / "a.txt").read_bytes()
    assert a == (tmp_path / "b.txt").read_bytes()
    assert a != (tmp_path / "c.txt").read_bytes()


def test_documents_are_separated_by_endoftext_lines(tmp_path):
    path = tmp_path / "nested" / "dir" / "stories.txt"
    assert main(["--output", str(path), "--stories", "50", "--seed", "1"]) == 0
    text = path.read_text()
    documents = text.split("\n<|endoftext|>\n")
    assert documents[-1] == "" and len(documents) == 51
    assert documents[:-1] == list(stories(50, seed=1))
    assert all(d.strip() == d and "<|endoftext|>" not in d for d in documents[:-1])

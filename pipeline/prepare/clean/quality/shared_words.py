"""One word split per document for a chain of datatrove filters.

Gopher quality, Gopher repetition and FineWeb each split the whole text into words with
datatrove's English tokenizer (spaCy), the costliest step of all four filters. datatrove's filters
take a `WordTokenizer` in place of a language for just such custom tokenizers; this one is
datatrove's own English tokenizer, remembering the words of the last text it split, so a chain
splits each document once and every filter sees exactly the words it would have split itself.
Imported only where datatrove is installed.
"""

from __future__ import annotations

from datatrove.utils.typeshelper import Languages
from datatrove.utils.word_tokenizers import WordTokenizer, load_word_tokenizer


class SharedWords(WordTokenizer):
    def __init__(self) -> None:
        super().__init__(Languages.english)
        self._tokenizer = load_word_tokenizer(Languages.english)
        self._text: str | None = None
        self._words: list[str] = []

    def word_tokenize(self, text: str) -> list[str]:
        if text != self._text:  # the same str object compares by identity first: no scan
            self._text, self._words = text, self._tokenizer.word_tokenize(text)
        return list(self._words)

    def sent_tokenize(self, text: str) -> list[str]:
        return self._tokenizer.sent_tokenize(text)

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return self._tokenizer.span_tokenize(text)

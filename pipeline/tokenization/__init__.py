"""Tokenization: a spec names a tokenizer, and every tokenizer ends documents by the same rule.

- `specs`: the seam. A spec (a tiktoken encoding name, a `tokenizer.json`, a SentencePiece `.model`,
  a tiktoken spec file, a hub model) becomes a loaded `Tokenizer` (`load_tokenizer`) and its
  manifest entry (`tokenizer_info`). Callers import these names from this package.
- `tiktoken_backend`, `hf_backend`, `sentencepiece_backend`: the libraries that encode, each named
  by the library it wraps; `Tokenizer` is any of them. A `.model` is read by `sentencepiece_model`,
  its normalization rules by `sentencepiece_normalizer`, and `sentencepiece_split` says where its
  long documents may be cut. `byte_level_bpe` says when tiktoken gives a byte-level BPE
  `tokenizer.json`'s ids, which `hf_backend` then encodes with.
- `hub`: tokenizers of Hugging Face Hub models, pinned to a commit (`hf:ORG/NAME@SHA`).
- `boundaries`: BOS and EOS, where one document ends and the next begins in ids; every backend
  applies it, and a `TokenizerError` from any module names the bad spec and its fix.

The seam is `specs` rather than `tokenizer`: it turns specs into tokenizers, and
`pipeline.tokenization.tokenizer` would say the same word twice. The package imports neither Beam
nor JAX, and `sentencepiece` only to load a `.model`: prepare, `inspect` and the trainer load
tokenizers through it alike.
"""

from pipeline.tokenization.boundaries import TokenizerError
from pipeline.tokenization.hub import is_hub_spec
from pipeline.tokenization.specs import (
    Tokenizer,
    absolute_spec,
    is_path_spec,
    load_tokenizer,
    tokenizer_info,
)

__all__ = [
    "Tokenizer",
    "TokenizerError",
    "absolute_spec",
    "is_hub_spec",
    "is_path_spec",
    "load_tokenizer",
    "tokenizer_info",
]

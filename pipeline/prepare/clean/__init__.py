"""The clean step: quality filters, exact and near dedup and eval decontamination, run as a stage
before the tokenizing one, each job in its room.

`quality/` datatrove's filters, run on whole documents first; `dedup/` what is compared (normalized
text, word hashes, MinHash band keys) and each bucket's duplicates; `decontamination/` the eval
n-grams a corpus is decontaminated against, which are common text and which documents are
contaminated, and `common_ngrams.jsonl`. What the stage does with them, here: `unit_fingerprints`
the first pass over a unit, kept in the state directory; `edits` the texts the filters change;
`removals` the keeper rule, the per-unit removal lists that the tokenizing pass reads, the stage's
completion record and `removals.jsonl`; `dry_run` what `--filter-dry-run` prints. What each step
does is here, as plain functions on a unit or a bucket; the Beam pipeline that strings them together
is `execution.beam_cleaning`.
"""

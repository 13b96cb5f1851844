"""The clean step: quality filters, exact and near dedup and eval decontamination, run as a stage
before the tokenizing one.

`quality_filters` datatrove's filters, run on whole documents first, with `shared_words` (one word
split per document for them) and `edits` (the texts they change); `dry_run` what `--filter-dry-run`
prints; `fingerprints` holds what is compared (normalized text, word hashes, MinHash band keys);
`eval_sets` the eval n-grams a corpus is decontaminated against; `unit_fingerprints` the first pass
over a unit, kept in the state directory; `eval_matches` which eval n-grams are common text and
which documents are contaminated; `key_buckets` the dedup keys by bucket and each bucket's
duplicates; `removals` the keeper rule, the per-unit removal lists that the tokenizing pass reads,
the stage's completion record and `removals.jsonl`; `report` `common_ngrams.jsonl`. What each step
does is here, as plain functions on a unit or a bucket; the Beam pipeline that strings them together
is `execution.beam_cleaning`.
"""

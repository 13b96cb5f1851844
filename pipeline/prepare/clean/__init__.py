"""cleaning: quality filters, exact and near dedup and eval decontamination, a Beam job run before
the tokenizing one.

`unit_documents` numbers a unit's documents, the one reading that the fingerprint pass and the
tokenizing pass share; `quality_filters` datatrove's filters, run on whole documents first, and
`edits` the texts they change; `fingerprints` holds what is compared (normalized text, word hashes,
MinHash band keys); `eval_sets` the eval n-grams a corpus is decontaminated against;
`unit_fingerprints` the first pass over a unit, kept in the state directory; `removals` the keeper
rule, the per-unit removal lists that the tokenizing pass reads, and `removals.jsonl`; `job` the
stage's Beam job.
"""

"""Decontamination against eval sets: their n-grams (`eval_sets`), which are common text and which
documents hold the others (`eval_matches`), and `common_ngrams.jsonl` (`report`)."""

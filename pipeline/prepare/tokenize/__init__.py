"""prepare's tokenize step: one work unit's documents to token ids, split, shuffled and packed into
records."""

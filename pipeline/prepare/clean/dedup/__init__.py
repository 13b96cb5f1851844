"""Deduplication: what documents are compared by (`fingerprints`) and the duplicates each bucket of
keys holds (`key_buckets`)."""

"""Prepare raw corpora into tokenized ArrayRecord shards, and stream them back for training."""

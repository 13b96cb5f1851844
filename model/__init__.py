"""A GPT-2-style decoder in Flax NNX with partitioning annotations."""

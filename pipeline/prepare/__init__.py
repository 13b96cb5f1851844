"""prepare: raw corpora to tokenized ArrayRecord shards and a manifest, as an Apache Beam pipeline.

`launcher` plans and runs a job; `planning`, `units`, `sources` and `worker` decide what each work
unit reads and writes; `finalize` assembles the manifest; `cleaning` is the dedup and
decontamination stage run before tokenizing. Nothing here is imported by the loader.
"""

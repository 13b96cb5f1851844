"""Packaging: `pip install -e .[dev]` for work here; Beam ships this file to remote workers."""

from setuptools import find_packages, setup

setup(
    name="tokshards",
    version="0.1.0",
    description="Streaming tokenization to deterministic ArrayRecord shards, a Grain loader and a "
    "Flax NNX GPT trainer.",
    python_requires=">=3.11",
    packages=find_packages(include=["schemas", "pipeline", "pipeline.*", "model", "train"]),
    package_data={"pipeline": ["assets/*.tiktoken", "assets/*.LICENSE"], "schemas": ["*.json"]},
    install_requires=[
        "apache-beam>=2.60",
        "array-record>=0.8",
        "grain>=0.2.18",
        "tiktoken>=0.9",
        "datasets>=3.0",
        "pyarrow>=17",
        "zstandard>=0.22",
        "numpy>=1.26",
        "jsonschema>=4.20",
        "jax>=0.7",
        "flax>=0.12",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.11",
        "matplotlib>=3.8",
        "tqdm>=4.66",
    ],
    extras_require={
        "gcp": ["apache-beam[gcp]>=2.60", "gcsfs"],  # gcsfs: the loader reads gs:// manifests via etils.epath
        "dev": ["pytest>=8", "pytest-timeout>=2.3"],
    },
)

"""Fixtures every test room shares; the helpers behind them live in `support/`."""

from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests import the project from the checkout, installed or not, and their helpers as `support.*`.
sys.path[:0] = [REPO, os.path.dirname(os.path.abspath(__file__))]

# Fixtures of the hub stand-in, the clean worker environment, the two-source mixture and the
# directories to damage.
pytest_plugins = ("support.hub_standin", "support.worker_venv", "support.batches", "support.damage")


@pytest.fixture(scope="session", autouse=True)
def index_cache(tmp_path_factory) -> str:
    """The loader's lengths cache in a temporary directory, for this process and those it starts."""
    from pipeline.load.lengths import CACHE_ENV

    path = str(tmp_path_factory.mktemp("lengths"))
    os.environ[CACHE_ENV] = path
    return path


@pytest.fixture(scope="session")
def encoding():
    from pipeline.tokenization.tiktoken_backend import load_encoding

    return load_encoding("gpt2")


@pytest.fixture(scope="session")
def token_dataset(tmp_path_factory) -> str:
    """A small prepared directory written from token ids, without a prepare run: for tests that
    need valid data to get past, not what is in it."""
    from support.synthetic import small_prepared

    return small_prepared(str(tmp_path_factory.mktemp("tokens")))


@pytest.fixture(scope="session")
def stories_dataset(tmp_path_factory) -> str:
    """A small prepared story corpus with a validation split, read (never written) by the trainer's
    tests."""
    from pipeline.corpus import write_corpus
    from support.runs import run_prepare

    root = tmp_path_factory.mktemp("stories")
    write_corpus(str(root / "stories.txt"), 400, seed=5)
    run_prepare(
        [str(root / "stories.txt")],
        str(root / "out"),
        "--validation-fraction",
        "0.1",
        "--record-tokens",
        "512",
    )
    return str(root / "out")

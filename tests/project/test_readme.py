"""Every Python snippet of the README runs as written, on the data its commands name, and the Load
snippet runs with the `load` extra alone: JAX cannot be imported while it runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pipeline.corpus import write_corpus
from support.runs import REPO, run_prepare

# Imported first by every process of the snippet (its prefetch workers too): JAX is not installed.
NO_JAX = """import sys

class _NoJax:
    def find_spec(self, name, path=None, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ModuleNotFoundError("No module named 'jax'")

sys.meta_path.insert(0, _NoJax())
"""


def python_snippets() -> list[str]:
    with open(os.path.join(REPO, "README.md")) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_readme_has_python_snippets():
    assert python_snippets()


@pytest.fixture(scope="module")
def readme_data(tmp_path_factory) -> str:
    """A directory with the README's `data/stories` and `data/web`, prepared as it says."""
    root = tmp_path_factory.mktemp("readme")
    for name, seed in (("stories", 1), ("web", 2)):
        corpus = str(root / f"{name}.txt")
        write_corpus(corpus, 300, seed=seed)
        run_prepare([corpus], str(root / "data" / name))
    blocker = root / "no_jax"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(NO_JAX)
    return str(root)


# The Load snippet's comments, and after it what checks them: run in the snippet's module, it
# prints what its names hold.
LOAD_COMMENTS = (
    '# {"inputs", "targets"}: int32 [8 / shards, 256]',
    "# a few integers and its packing; set_state(state) resumes exactly",
    "# int64 [2]: target tokens of the batch per source",
    '# ("web", "stories"), the order of source_tokens',
)
LOAD_PROBE = """
if __name__ == "__main__":
    import dataclasses, json

    def leaves(value):
        return [x for v in value.values() for x in leaves(v)] if isinstance(value, dict) else (
            [x for v in value for x in leaves(v)] if isinstance(value, list) else [value])

    again = make_iterator(dataclasses.replace(config, worker_count=0))  # any worker count restores
    first, second = next(again), next(again)
    again.close()
    resumed = make_iterator(config)
    resumed.set_state(state)
    after = next(resumed)
    resumed.close()
    tokens = next(make_iterator(mixed))["source_tokens"]
    print(json.dumps({
        "batch": {name: [str(array.dtype), list(array.shape)] for name, array in batch.items()},
        "deterministic": sorted(first) == sorted(batch)
            and all((first[k] == batch[k]).all() for k in batch),
        "state": [type(x).__name__ for x in leaves(state)],
        "resumed": sorted(after) == sorted(second)
            and all((after[k] == second[k]).all() for k in second),
        "source_tokens": [str(tokens.dtype), list(tokens.shape), int(tokens.sum())],
        "source_names": list(mixed.source_names),
    }))
"""


def _run(script_text: str, readme_data: str, name: str) -> subprocess.CompletedProcess:
    script = os.path.join(readme_data, f"{name}.py")
    with open(script, "w") as f:
        f.write(script_text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(readme_data, "no_jax"), REPO])}
    result = subprocess.run(
        [sys.executable, script],
        cwd=readme_data,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.integration
@pytest.mark.parametrize("index", range(len(python_snippets())))
def test_a_python_snippet_runs_as_written_without_jax(index, readme_data):
    snippet = python_snippets()[index]
    if "make_iterator" not in snippet:
        _run(snippet, readme_data, f"snippet_{index}")
        return
    # The Load snippet: what its comments say of the batch, the state and the mixture holds.
    assert all(comment in snippet for comment in LOAD_COMMENTS), (
        "the Load snippet's comments changed: check them here"
    )
    probed = json.loads(
        _run(snippet + LOAD_PROBE, readme_data, f"snippet_{index}").stdout.splitlines()[-1]
    )
    assert probed["batch"] == {
        "inputs": ["int32", [8, 256]],
        "targets": ["int32", [8, 256]],
    }  # one shard: no JAX
    assert probed["deterministic"]
    assert probed["state"] and len(probed["state"]) <= 16
    assert set(probed["state"]) == {"int", "str"} and probed["state"].count("str") == 1
    assert probed["resumed"]
    assert probed["source_tokens"] == ["int64", [2], 8 * 256]
    assert probed["source_names"] == ["web", "stories"]

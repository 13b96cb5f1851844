"""Every Python snippet of the README runs as written, on the data its commands name, and the Load
snippet runs with the `load` extra alone: JAX cannot be imported while it runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import run_prepare

from pipeline.corpus import write_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Imported first by every process of the snippet (its prefetch workers too): JAX is not installed.
NO_JAX = '''import sys

class _NoJax:
    def find_spec(self, name, path=None, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ModuleNotFoundError("No module named 'jax'")

sys.meta_path.insert(0, _NoJax())
'''


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


@pytest.mark.parametrize("index", range(len(python_snippets())))
def test_a_python_snippet_runs_as_written_without_jax(index, readme_data):
    script = os.path.join(readme_data, f"snippet_{index}.py")
    with open(script, "w") as f:
        f.write(python_snippets()[index])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(readme_data, "no_jax"), REPO])}
    result = subprocess.run([sys.executable, script], cwd=readme_data, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr

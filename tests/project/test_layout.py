"""The README's Layout table names every module of the packages it lists, and only modules that
exist."""

from __future__ import annotations

import os
import re

from support.runs import REPO

PACKAGES = (
    "schemas/",
    "pipeline/cli/",
    "pipeline/dataset/",
    "pipeline/prepare/",
    "pipeline/prepare/read/",
    "pipeline/prepare/clean/",
    "pipeline/prepare/tokenize/",
    "pipeline/prepare/write/",
    "pipeline/prepare/execution/",
    "pipeline/export/",
    "pipeline/load/",
    "pipeline/tokenization/",
    "pipeline/",
    "model/",
    "train/",
    "benchmarks/",
)


def layout_rows() -> dict[str, set[str]]:
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read().split("## Layout", 1)[1]
    rows = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) > 3 and cells[1].strip().startswith("`"):
            rows[cells[1].strip().strip("`")] = set(re.findall(r"`([a-z_][a-z0-9_]*)/?`", cells[2]))
    return rows


def modules(package: str) -> set[str]:
    directory = os.path.join(REPO, package)
    names = set()
    for name in os.listdir(directory):
        if name.endswith(".py") and not name.startswith("__"):
            names.add(name[:-3])
        elif (
            os.path.exists(os.path.join(directory, name, "__init__.py"))
            and f"{package}{name}/" not in PACKAGES
        ):
            names.add(name)
    return names


def test_the_layout_table_matches_the_tree():
    rows = layout_rows()
    assert set(PACKAGES) <= set(rows)
    for package in PACKAGES:
        named = rows[package]
        present = modules(package)
        # A subpackage without a row of its own has its modules named in its package's row.
        nested = {
            m
            for sub in present
            if os.path.isdir(os.path.join(REPO, package, sub))
            for m in modules(f"{package}{sub}/")
        }
        assert present <= named, (
            f"{package}: not in the README's Layout table: {sorted(present - named)}"
        )
        assert named <= present | nested, (
            f"{package}: the README names what is not there: {sorted(named - present - nested)}"
        )

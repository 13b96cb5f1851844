"""The normalization rules of a SentencePiece model, read from its `precompiled_charsmap`.

The library normalizes text before it segments it: a rule maps a source string (the longest that
matches at a position) to its replacement (NFKC's `ﬁ` -> `fi`, a tab -> a space). The rules are
stored as a darts-clone double array over the UTF-8 bytes of each rule's source, whose leaf values
index the NUL-separated replacements after it (normalizer.cc: DecodePrecompiledCharsMap,
NormalizePrefix). The library offers no way to list them; the split rule (`sentencepiece_split`)
needs to know which rules reach a space, so they are walked here node by node: darts-clone shares
suffixes, so nodes are far fewer than rules (nmt_nfkc: 225k rules, 45k units).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Charsmap:
    children: dict[int, dict[int, int]]  # reachable node -> {label byte: child node}
    label: dict[int, int]  # reachable node (not the root) -> the byte that leads to it
    leaf_value: dict[int, bytes]  # reachable node where a rule ends -> its replacement


def read_charsmap(blob: bytes) -> Charsmap:
    """The rules' trie; raises struct.error, ValueError or IndexError for a blob that is not one."""
    (size,) = struct.unpack_from("<I", blob, 0)
    units = np.frombuffer(blob, dtype="<u4", count=size // 4, offset=4).astype(np.int64)
    replacements = blob[4 + size :]
    n = len(units)
    base = np.arange(n, dtype=np.int64) ^ ((units >> 10) << ((units & (1 << 9)) >> 6))
    # Labels of the units, with one more no byte has, where a would-be child past the array points,
    # so that every position's would-be child for every byte is looked up at once; a child is real
    # when its unit carries that byte (darts.h: traverse). Only edges out of reachable nodes are
    # used.
    unit_label = np.full(n + 1, -1, dtype=np.int64)
    unit_label[:n] = units & ((1 << 31) | 0xFF)  # a leaf unit's label has the MSB: no byte's
    labels = np.arange(1, 256, dtype=np.int64)
    parents, kids, edge_labels = [], [], []
    for lo in range(0, n, 8192):
        child = np.minimum(base[lo : lo + 8192, None] ^ labels[None, :], n)
        p, k = np.nonzero(unit_label[child] == labels[None, :])
        parents.append(p + lo)
        kids.append(child[p, k])
        edge_labels.append(labels[k])
    parents_a, kids_a, labels_a = (np.concatenate(a) for a in (parents, kids, edge_labels))
    order = np.argsort(parents_a, kind="stable")
    parents_a, kids_a, labels_a = parents_a[order], kids_a[order], labels_a[order]
    first = np.searchsorted(parents_a, np.arange(n + 1))
    children: dict[int, dict[int, int]] = {}
    label: dict[int, int] = {}
    leaf_value: dict[int, bytes] = {}
    todo = [0]
    while todo:
        node = todo.pop()
        if node in children:
            continue
        lo, hi = first[node], first[node + 1]
        children[node] = dict(zip(labels_a[lo:hi].tolist(), kids_a[lo:hi].tolist()))
        for byte, c in children[node].items():
            label[c] = byte
            todo.append(c)
        if node and (units[node] >> 8) & 1:
            value = int(units[base[node]] & ((1 << 31) - 1))
            leaf_value[node] = replacements[value : replacements.index(b"\0", value)]
    return Charsmap(children, label, leaf_value)


def nodes_reaching(charsmap: Charsmap, bad_leaf: Callable[[bytes], bool]) -> set[int]:
    """The nodes from which a rule whose replacement is `bad_leaf` can be reached (the node
    included)."""
    bad: set[int] = set()
    done: set[int] = set()
    for root in charsmap.children:
        if root in done:
            continue
        stack = [(root, False)]
        while stack:  # post-order over the DAG
            node, expanded = stack.pop()
            if node in done:
                continue
            kids = charsmap.children.get(node, {}).values()
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if k not in done)
                continue
            done.add(node)
            if (node in charsmap.leaf_value and bad_leaf(charsmap.leaf_value[node])) or any(
                k in bad for k in kids
            ):
                bad.add(node)
    return bad

"""Semantic, per-field diff and three-way merge of policy documents (plain dicts from `to_data()`).

Lists of named items are matched by their key, not their position, so reordering tenants, pools,
SLAs, priorities, quotas or a pool's taints is not a change. Namespace and node lists are sets.
Paths read like `tenants[search].namespaces` or
`pricing.gpu_models["NVIDIA A100-SXM4-80GB"].purchase_price`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from app.policy.paths import Key, join, keyer, matches

# Lists whose order means nothing and whose items are plain values.
_SETS = {("tenants", "*", "namespaces"), ("pools", "*", "nodes")}

_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


@dataclass(frozen=True)
class Change:
    """One field added, removed or changed; `old`/`new` are None on the side where it is absent."""

    path: str
    op: Literal["add", "remove", "change"]
    old: Any = None
    new: Any = None

    def as_dict(self) -> dict:
        """JSON-ready form for storage and the API."""
        return {"path": self.path, "op": self.op, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class Conflict:
    """One field both sides changed differently (None where a side removed it or never had it)."""

    path: str
    base: Any
    ours: Any
    theirs: Any

    def as_dict(self) -> dict:
        """JSON-ready form for storage and the API."""
        return {"path": self.path, "base": self.base, "ours": self.ours, "theirs": self.theirs}


@dataclass
class MergeResult:
    """The merged document, or None with the conflicts that block it."""

    merged: dict | None
    conflicts: list[Conflict] = field(default_factory=list)


class _Keyed(dict):
    """A list of named items, held as key -> item in list order."""


Keyed = _Keyed  # public: structured edits (forms.py) build into the same normalized tree


class _Set(list):
    """A list compared as a set (order kept for output)."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def normalize(value: Any, schema: tuple[str, ...] = ()) -> Any:
    """Turn keyed lists into _Keyed maps and set-like lists into _Set, recursively."""
    if isinstance(value, dict):
        return {k: normalize(v, (*schema, k)) for k, v in value.items()}
    if isinstance(value, list):
        if any(matches(schema, s) for s in _SETS) and all(isinstance(v, str) for v in value):
            if len(set(value)) == len(value):
                return _Set(value)
        key_of = keyer(schema)
        if key_of is not None and all(isinstance(v, dict) for v in value):
            try:
                keys = [key_of(v) for v in value]
            except (KeyError, TypeError):
                keys = []
            # Duplicate or missing keys (an invalid document) fall back to comparing the whole list.
            if len(set(keys)) == len(value):
                return _Keyed((k, normalize(v, (*schema, "*"))) for k, v in zip(keys, value))
        return value
    return value


def denormalize(value: Any) -> Any:
    """Back from the normalized form to the document's plain dicts and lists."""
    if value is MISSING:
        return None
    if isinstance(value, _Keyed):
        return [denormalize(v) for v in value.values()]
    if isinstance(value, _Set):
        return list(value)
    if isinstance(value, dict):
        return {k: denormalize(v) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Semantic equality: keyed lists and sets ignore order; "0.30" equals "0.3"."""
    if isinstance(a, _Set) and isinstance(b, _Set):
        return set(a) == set(b)
    if isinstance(a, dict) and isinstance(b, dict):
        if isinstance(a, _Keyed) != isinstance(b, _Keyed) or a.keys() != b.keys():
            return False
        return all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str) and a != b and _NUMBER.match(a) and _NUMBER.match(b):
        try:
            return Decimal(a) == Decimal(b)
        except InvalidOperation:
            return False
    if isinstance(a, bool) or isinstance(b, bool) or a is MISSING or b is MISSING:
        return type(a) is type(b) and a == b  # True == 1 in Python, but not in a policy document
    return a == b


def _child(path: str, key: str, container: Any) -> str:
    return join(path, Key(key) if isinstance(container, _Keyed) else key)


def _diff(a: Any, b: Any, path: str, out: list[Change]) -> None:
    if _same(a, b):
        return
    if isinstance(a, _Set) and isinstance(b, _Set):
        out.extend(Change(path, "remove", v, None) for v in a if v not in b)
        out.extend(Change(path, "add", None, v) for v in b if v not in a)
        return
    if isinstance(a, dict) and isinstance(b, dict) and isinstance(a, _Keyed) == isinstance(b, _Keyed):
        for key in a:
            if key not in b:
                out.append(Change(_child(path, key, a), "remove", denormalize(a[key]), None))
            else:
                _diff(a[key], b[key], _child(path, key, a), out)
        for key in b:
            if key not in a:
                out.append(Change(_child(path, key, b), "add", None, denormalize(b[key])))
        return
    out.append(Change(path, "change", denormalize(a), denormalize(b)))


def diff(old: dict, new: dict) -> list[Change]:
    """Per-field changes from `old` to `new`; named list items are matched by key."""
    out: list[Change] = []
    _diff(normalize(old), normalize(new), "", out)
    return out


def _merge_sets(base: Any, ours: _Set, theirs: _Set) -> _Set:
    base_items = list(base) if isinstance(base, _Set) else []
    removed = {v for v in base_items if v not in ours or v not in theirs}
    merged = [v for v in ours if v not in removed]
    merged += [v for v in theirs if v not in merged and v not in removed]
    return _Set(merged)


def _merge(base: Any, ours: Any, theirs: Any, path: str, conflicts: list[Conflict]) -> Any:
    if _same(base, ours):
        return theirs
    if _same(base, theirs) or _same(ours, theirs):
        return ours
    if isinstance(ours, _Set) and isinstance(theirs, _Set) and (base is MISSING or isinstance(base, _Set)):
        return _merge_sets(base, ours, theirs)
    containers = (ours, theirs) if base is MISSING else (base, ours, theirs)
    if all(isinstance(c, dict) for c in containers) and len({isinstance(c, _Keyed) for c in containers}) == 1:
        # Both sides edited inside the same map (or both added the same item): merge field by field.
        base_map = base if base is not MISSING else type(ours)()
        merged = type(ours)()
        for key in [*ours, *(k for k in theirs if k not in ours), *(k for k in base_map if k not in ours and k not in theirs)]:
            value = _merge(
                base_map.get(key, MISSING), ours.get(key, MISSING), theirs.get(key, MISSING), _child(path, key, ours), conflicts
            )
            if value is not MISSING:
                merged[key] = value
        return merged
    conflicts.append(Conflict(path, denormalize(base), denormalize(ours), denormalize(theirs)))
    return ours


def three_way_merge(base: dict, ours: dict, theirs: dict) -> MergeResult:
    """Merge two edits of `base`: one-sided changes apply, the same field changed differently conflicts."""
    conflicts: list[Conflict] = []
    merged = _merge(normalize(base), normalize(ours), normalize(theirs), "", conflicts)
    if conflicts:
        return MergeResult(merged=None, conflicts=conflicts)
    return MergeResult(merged=denormalize(merged), conflicts=[])

"""Structured edits of a policy document: form fields addressed by field path, applied to a new document.

A form posts `path -> text` (`quotas[vision/mixed-a100].guaranteed_gpus = "6"`) and the paths of items
to remove. Paths are the ones `paths.py` writes for validation and the diff, so an error comes back at
the name of the input that caused it. New rows use a `+n` key (`quotas[+1].tenant`); a new entry of a
mapping names itself with a `_key` field (`pricing.gpu_models[+1]._key`). Text is left to the schema
to read: "0.6" becomes the Decimal 0.6 and "6" the int 6, so numbers stay numbers in the document.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from app.core.errors import FieldError, Invalid
from app.policy.diff import Keyed, denormalize, normalize
from app.policy.document import PolicyDocument
from app.policy.parsing import pydantic_errors
from app.policy.paths import Key, item_paths, join, keyer, parent, parse_path, within
from app.policy.validation import LatencyBuckets, validate

# Fields whose value is a list of names, typed as one comma- or space-separated line.
LIST_FIELDS = {"nodes", "namespaces", "time_sliced_nodes", "eviction_order"}
NEW = "+"  # the key prefix of a row added on the form: +1, +2, ...
_NEW_ROW = re.compile(r"^\+[0-9]+$")
NAME = "_key"  # the field a new mapping entry is named by
_SPLIT = re.compile(r"[\s,]+")


@dataclass
class EditResult:
    """The edited document (None when it does not fit the schema) and every finding, at the form's own paths."""

    document: PolicyDocument | None
    findings: list[FieldError] = field(default_factory=list)
    saved: bool = False  # set by the service that stores it

    @property
    def errors(self) -> list[FieldError]:
        return [f for f in self.findings if f.severity == "error"]


def _leaf(text: str, name: str):
    text = text.strip()
    if name in LIST_FIELDS:
        return [part for part in _SPLIT.split(text) if part]
    if text == "{}":
        return {}
    return text


def _container(schema: list[str]):
    return Keyed() if keyer(schema) is not None else {}


def _walk(tree: dict, parts: list[str], *, create: bool, at: str):
    """The container holding the last step of `parts`, and the schema path to it."""
    node, schema = tree, []
    for part in parts[:-1]:
        if not isinstance(node, dict):
            raise Invalid("no such field", [FieldError(at, "does not exist in the document")])
        keyed = isinstance(node, Keyed)
        child_schema = [*schema, "*" if keyed else part]
        if part not in node:
            if not create:
                return None, schema
            node[part] = _container(child_schema)
        node, schema = node[part], child_schema
    if not isinstance(node, dict):
        raise Invalid("no such field", [FieldError(at, "does not exist in the document")])
    return node, schema


def _name_new_entries(node, errors: list[FieldError], renames: dict[str, str], path: str = "") -> None:
    """Give new mapping entries their `_key`; drop new rows left blank."""
    if not isinstance(node, dict):
        return
    for key in list(node):
        value = node[key]
        here = join(path, Key(key) if isinstance(node, Keyed) else key)
        if isinstance(key, str) and _NEW_ROW.match(key):
            if isinstance(value, dict) and not any(v not in ("", [], {}, None) for k, v in value.items() if k != NAME) \
                    and not value.get(NAME):
                del node[key]  # an added row nobody filled in
                continue
            if not isinstance(node, Keyed):
                name = value.pop(NAME, "") if isinstance(value, dict) else ""
                if not name:
                    errors.append(FieldError(join(here, NAME), "required: name the new entry"))
                    del node[key]
                    continue
                if name in node:
                    errors.append(FieldError(join(here, NAME), f"'{name}' is already there"))
                    del node[key]
                    continue
                del node[key]
                node[name] = value
                renames[join(path, name)] = here
        _name_new_entries(value, errors, renames, here)


def _renames(node, final_path: str, form_path: str, out: dict[str, str], schema: tuple[str, ...] = ()) -> None:
    """Final item path -> the form's path of it, for items renamed on the form or added to it."""
    if isinstance(node, Keyed):
        fn = keyer(schema)
        keys = []
        for item in node.values():
            try:
                keys.append(fn(item) if fn else None)
            except (KeyError, TypeError):
                keys.append(None)
        finals = item_paths(final_path, [k if isinstance(k, str) else "" for k in keys])
        for (form_key, item), final in zip(node.items(), finals):
            form = join(form_path, Key(form_key))
            if final != form:
                out[final] = form
            _renames(item, final, form, out, (*schema, "*"))
    elif isinstance(node, dict):
        for key, item in node.items():
            _renames(item, join(final_path, key), join(form_path, key), out, (*schema, key))


def to_form_path(path: str, renames: Mapping[str, str]) -> str:
    """A finding's path as the form named it (renamed and added rows keep the form's name)."""
    for final in sorted(renames, key=len, reverse=True):
        if within(path, final):
            return renames[final] + path[len(final):]
    return path


def apply_edit(doc: PolicyDocument, values: Mapping[str, str], removed: Iterable[str] = (), *,
               measured_peak_mib: dict[str, float] | None = None,
               latency_buckets: LatencyBuckets | None = None) -> EditResult:
    """`doc` with the form's values set and its removed items gone, validated; findings at the form's paths.

    An empty value removes the field (it takes its default; an optional map entry disappears).
    """
    tree = normalize(doc.to_values())
    errors: list[FieldError] = []
    for path in removed:
        parts = parse_path(path, field=path)
        node, _ = _walk(tree, parts, create=False, at=path)
        if node is not None:
            node.pop(parts[-1], None)
    for path, text in values.items():
        parts = parse_path(path, field=path)
        if any(within(path, r) for r in removed):
            continue
        node, _ = _walk(tree, parts, create=True, at=path)
        value = _leaf(text, parts[-1])
        if value in ("", []) and parts[-1] not in LIST_FIELDS:
            if parts[-1] == NAME:
                node[NAME] = ""
            else:
                node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    renames: dict[str, str] = {}
    _name_new_entries(tree, errors, renames)
    _renames(tree, "", "", renames)
    data = denormalize(tree)
    try:
        edited = PolicyDocument.model_validate(data)
    except ValidationError as exc:
        found = errors + pydantic_errors(exc, data)
        return EditResult(None, [FieldError(to_form_path(e.path, renames), e.message, e.severity) for e in found])
    findings = errors + validate(edited, measured_peak_mib=measured_peak_mib, latency_buckets=latency_buckets)
    return EditResult(edited if not errors else None,
                      [FieldError(to_form_path(e.path, renames), e.message, e.severity) for e in findings])


def blocking(findings: Iterable[FieldError], posted: Iterable[str]) -> list[FieldError]:
    """The errors a form must answer: at a posted field, its item, or an item or section the field is in."""
    posted = set(posted)
    parents = {parent(p) for p in posted} - {""}
    return [f for f in findings if f.severity == "error"
            and (f.path in posted or any(within(p, f.path) for p in posted) or any(within(f.path, q) for q in parents))]

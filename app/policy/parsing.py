"""Parsing the policy document from YAML or JSON text, with errors at the document's own field paths."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import yaml
from pydantic import ValidationError

from app.core.errors import FieldError, Invalid
from app.policy.document import PolicyDocument
from app.policy.paths import named
from app.policy.validation import LatencyBuckets, validate


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser is ~10x faster
    """YAML 1.2-style scalars: "09:00" stays a string, decimals stay exact, yes/no are strings."""

    def construct_mapping(self, node, deep=False):
        # PyYAML keeps the last of two equal keys; a policy must not lose a MIG node or a price that way.
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key_node.value}'", key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag.rsplit(":", 1)[-1] not in ("int", "float", "bool", "timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."),
)


def _yaml_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = loader.construct_scalar(node)
    if len(text) > 40:  # no field needs more; Python refuses past 4,300 digits with a message about internals
        raise yaml.constructor.ConstructorError(None, None, "integer with more than 40 digits", node.start_mark)
    return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)


def _yaml_decimal(loader: yaml.SafeLoader, node: yaml.Node) -> Decimal:
    text = loader.construct_scalar(node).lower().replace(".inf", "infinity").replace(".nan", "nan")
    return Decimal(text)


_Loader.add_constructor("tag:yaml.org,2002:int", _yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _yaml_decimal)


MAX_CHARS = 1_000_000  # a policy document is a few kB; change requests and the API share this limit
# Nodes a document may hold once its aliases are expanded: the example policy has ~1,000, and a
# 400-byte "billion laughs" document would otherwise expand to billions (seconds and gigabytes).
MAX_EXPANDED_NODES = 100_000


def _expanded_size(root: yaml.Node) -> tuple[int, list[str]]:
    """Nodes in the tree `root` stands for with every alias expanded (capped), and the path where it exceeds the budget."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]  # an alias: its expansion costs again, but is computed once
        if key in active:
            return MAX_EXPANDED_NODES + 1  # a recursive alias expands without end
        active.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        total = 1
        for child in children:
            total = min(total + size(child), MAX_EXPANDED_NODES + 1)
        active.discard(key)
        sizes[key] = total
        return total

    total = size(root)
    path: list[str] = []
    node = root
    seen: set[int] = set()
    while total > MAX_EXPANDED_NODES and isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and id(node) not in seen:
        seen.add(id(node))
        # Walk to the largest child while it alone is over budget: the path names where the aliases explode.
        items = (list(enumerate(node.value)) if isinstance(node, yaml.SequenceNode)
                 else [(k.value if isinstance(k, yaml.ScalarNode) else "?", v) for k, v in node.value])
        name, child = max(items, key=lambda item: sizes.get(id(item[1]), 0))
        if sizes.get(id(child), 0) <= MAX_EXPANDED_NODES:
            break
        path.append(f"[{name}]" if isinstance(name, int) else str(name))
        node = child
    return total, path


def _bounded_yaml(text: str):
    """yaml.load with a budget on alias expansion, checked on the composed graph before constructing anything."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        total, path = _expanded_size(node)
        if total > MAX_EXPANDED_NODES:
            where = ".".join(path).replace(".[", "[")
            raise Invalid("the policy document expands beyond its size limit",
                          [FieldError(where, f"more than {MAX_EXPANDED_NODES} values once aliases are expanded")])
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _load(text: str):
    if len(text) > MAX_CHARS:
        raise Invalid("the policy document is too large", [FieldError("", f"at most {MAX_CHARS} characters")])
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return json.loads(text, parse_float=Decimal)
        except ValueError:
            pass  # flow-style YAML is also valid input
    try:
        return _bounded_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise Invalid("the policy document is not valid YAML", [FieldError("", f"{exc.problem or exc}{where}")]) from None
    except (yaml.YAMLError, ValueError, ArithmeticError) as exc:
        raise Invalid("the policy document is not valid YAML", [FieldError("", str(exc))]) from None


def load_value(text: str, *, path: str = "value"):
    """One YAML value (a structured edit), with the document's scalar rules and alias budget; errors at `path`."""
    try:
        value = _load(text) if text.strip() else None
    except Invalid as exc:
        raise Invalid("the value is not valid", [FieldError(path, e.message) for e in exc.errors]) from None
    except RecursionError:
        raise Invalid("the value is nested too deeply", [FieldError(path, "nested too deeply")]) from None
    return _string_keys(value)


def _string_keys(value):
    """GPU indices written unquoted (`5:`) arrive as ints; the document keys them by string."""
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, int) and not isinstance(k, bool) else k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_string_keys(v) for v in value]
    return value


_MESSAGES = {"missing": "required", "extra_forbidden": "unknown field (not part of the policy document)"}


def pydantic_errors(exc: ValidationError, data=None) -> list[FieldError]:
    """Pydantic's errors as FieldErrors at the document's field paths (named items by key when `data` is given)."""
    out = []
    for err in exc.errors():
        loc = list(err["loc"])
        message = _MESSAGES.get(err["type"], err["msg"])
        if loc and loc[-1] == "[key]":
            loc.pop()
            message = f"key: {message}"
        out.append(FieldError(named(data, [p if isinstance(p, int) else str(p) for p in loc]), message))
    return out


def _build(text: str) -> PolicyDocument:
    try:
        data = _string_keys(_load(text))
    except RecursionError:
        raise Invalid("the policy document is nested too deeply", [FieldError("", "nested too deeply")]) from None
    if not isinstance(data, dict):
        raise Invalid("the policy document must be a mapping", [FieldError("", "expected a mapping of sections (tenants, pools, pricing, ...)")])
    try:
        return PolicyDocument.model_validate(data)
    except ValidationError as exc:
        raise Invalid("the policy document is invalid", pydantic_errors(exc, data)) from None


def check_document(text: str, *, measured_peak_mib: dict[str, float] | None = None,
                   latency_buckets: LatencyBuckets | None = None) -> tuple[PolicyDocument | None, list[FieldError]]:
    """Parse and validate without raising: (document or None, every error and warning)."""
    try:
        doc = _build(text)
    except Invalid as exc:
        return None, exc.errors
    return doc, validate(doc, measured_peak_mib=measured_peak_mib, latency_buckets=latency_buckets)


def parse_document(text: str) -> PolicyDocument:
    """Parse YAML or JSON text into a valid document; raise Invalid listing every error (warnings pass)."""
    doc = _build(text)
    errors = [e for e in validate(doc) if e.severity == "error"]
    if errors:
        raise Invalid("the policy document is invalid", errors)
    return doc

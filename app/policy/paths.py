"""Field paths of the policy document: the one naming validation, the diff, the forms and "Set field" share.

Named list items by their key (`quotas[vision/mixed-a100].guaranteed_gpus`, `tenants[search].class`),
mapping keys after a dot when they are identifiers and quoted in brackets otherwise
(`pricing.gpu_models["NVIDIA A100-SXM4-80GB"].pue`, `isolation.mig["gpu-a100-02"].gpus["0-3"]`), plain
list positions as `[i]` (`eviction_order[0]`). `parse_path` reads every path `path_of` writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from app.core.errors import FieldError, Invalid


class Key(str):
    """The key of a named list item (a tenant's name, a quota's tenant/pool): written `[key]`, unquoted."""


# Schema path (field names, "*" for any list item or map key) -> key of each item of that list.
KEYED: dict[tuple[str, ...], Callable[[dict], str]] = {
    ("tenants",): lambda i: i["name"],
    ("pools",): lambda i: i["name"],
    ("sla",): lambda i: i["service"],
    ("priorities",): lambda i: i["name"],
    ("quotas",): lambda i: f"{i['tenant']}/{i['pool']}",
    # Kubernetes identifies a taint by key and effect.
    ("isolation", "node_taints", "*"): lambda i: f"{i['key']}:{i['effect']}",
}

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def matches(schema: Sequence[str], pattern: Sequence[str]) -> bool:
    """Whether a schema path fits a pattern ("*" matches any one step)."""
    return len(schema) == len(pattern) and all(p in ("*", s) for s, p in zip(schema, pattern))


def keyer(schema: Sequence[str]) -> Callable[[dict], str] | None:
    """The key function of the named list at `schema`, or None when the list is not keyed."""
    return next((fn for pattern, fn in KEYED.items() if matches(tuple(schema), pattern)), None)


def join(path: str, part: str | int) -> str:
    """`path` extended by one step: a Key as `[key]`, an int as `[i]`, an identifier after a dot, else `["quoted"]`."""
    if isinstance(part, Key):
        # A key parse_path could not read back bare is quoted; it reads back the same.
        return f"{path}[{part}]" if part and not set(part) & set('[]"') else f"{path}[{json.dumps(str(part), ensure_ascii=False)}]"
    if isinstance(part, int):
        return f"{path}[{part}]"
    if not path:
        return part
    return f"{path}.{part}" if _IDENT.match(part) else f"{path}[{json.dumps(part, ensure_ascii=False)}]"


def path_of(*parts: str | int) -> str:
    """A field path from its steps (see `join`)."""
    out = ""
    for part in parts:
        out = join(out, part)
    return out


def item_paths(prefix: str, keys: Sequence[str]) -> list[str]:
    """Paths of a named list's items: by key, or by position for an item unnamed or named twice (as the diff does)."""
    return [join(prefix, Key(k) if k and keys.count(k) == 1 else i) for i, k in enumerate(keys)]


def named(data, loc: Sequence[str | int]) -> str:
    """The path of a location in plain document data (pydantic's `loc`), named list items by key where they have one."""
    parts: list[str | int] = []
    schema: list[str] = []
    node = data
    for step in loc:
        if isinstance(step, int) and isinstance(node, list):
            item = node[step] if 0 <= step < len(node) else None
            fn = keyer(schema)
            key = None
            if fn is not None and isinstance(item, dict):
                try:
                    key = fn(item)
                except (KeyError, TypeError):
                    key = None
                keys = [_key_or_none(fn, i) for i in node]
                if key is not None and (not isinstance(key, str) or not key or keys.count(key) > 1):
                    key = None  # an unnamed or twice-named item is told apart by its position
            parts.append(Key(key) if key is not None else step)
            schema.append("*")
            node = item
        else:
            parts.append(str(step))
            schema.append(str(step))
            node = node.get(step) if isinstance(node, dict) else None
    return path_of(*parts)


def _key_or_none(fn: Callable[[dict], str], item) -> str | None:
    try:
        return fn(item) if isinstance(item, dict) else None
    except (KeyError, TypeError):
        return None


_SEGMENT = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[("(?:[^"\\]|\\.)*")\]|\[([^\]"]+)\]')


def parse_path(path: str, *, field: str = "path") -> list[str]:
    """Split a path `path_of` wrote back into its steps (keys and indices as strings); errors at `field`."""
    parts, at = [], 0
    path = path.strip()
    while at < len(path):
        match = _SEGMENT.match(path, at)
        if match is None or match.end() == at or (at == 0 and path.startswith(".")):
            raise Invalid("not a field path", [FieldError(field, f"cannot read {path[at:]!r}; use the paths the diff shows")])
        ident, quoted, bare = match.groups()
        parts.append(ident if ident is not None else json.loads(quoted) if quoted is not None else bare)
        at = match.end()
    if not parts:
        raise Invalid("not a field path", [FieldError(field, "required")])
    return parts


def parent(path: str) -> str:
    """The path one step up (`quotas[a/b].guaranteed_gpus` -> `quotas[a/b]`); "" for a top-level field."""
    start, at = 0, 0
    while at < len(path):
        match = _SEGMENT.match(path, at)
        if match is None or match.end() == at:
            break
        start, at = at, match.end()
    return path[:start]


def within(path: str, prefix: str) -> bool:
    """Whether `path` is `prefix` or a field under it."""
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")

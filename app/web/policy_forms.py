"""The structured policy editor's forms: one per section of the document, every input named by its field path.

A form is built from the draft document, or from what was posted when it comes back with errors (the
input is kept). Inputs are named with `paths.path_of`, so a validation finding's path is the name of the
input it belongs to and shows next to it. Added rows are keyed `+1`, `+2`, ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from sqlmodel import Session

from app.core.errors import FieldError
from app.core.settings import get_settings
from app.core.timeutil import floor_hour, utcnow
from app.metrics.tenant_usage_read import PoolUse, pool_use
from app.policy import gpus
from app.policy.document import PolicyDocument
from app.policy.forms import NAME, NEW
from app.policy.paths import Key, join, parent, path_of, within
from app.policy.validation import pool_model

USE_DAYS = 30  # "last month": the quota form's actual-use columns
CLASSES = ["inference", "training", "preprocessing"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
YES_NO = ["true", "false"]


@dataclass
class Input:
    """One input: its path is its name; value is the text shown (posted text when the form comes back)."""

    path: str
    label: str
    value: str = ""
    kind: str = "text"  # text | number | select | list
    options: list[str] = field(default_factory=list)
    step: str = "any"
    errors: list[str] = field(default_factory=list)
    hint: str = ""


@dataclass
class Row:
    path: str
    cells: list[Input | str]  # a str is a read-only cell (a row's fixed key, actual use)
    new: bool = False
    removed: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass
class Table:
    title: str
    prefix: str  # the list or mapping the rows belong to; "add a row" names it
    columns: list[str]
    rows: list[Row]
    hint: str = ""
    can_add: bool = True


@dataclass
class Group:
    title: str
    inputs: list[Input]
    hint: str = ""
    remove: str = ""  # the path a "remove" checkbox removes (a MIG node's layout)


@dataclass
class Section:
    name: str
    title: str
    blocks: list[Table | Group]
    other_errors: list[FieldError] = field(default_factory=list)  # findings no input of the form shows


SECTIONS = {
    "quotas": "Quotas",
    "priorities": "Priorities",
    "tenants": "Tenants and reservations",
    "pools": "Pools",
    "isolation": "Isolation",
    "sla": "SLA services",
    "pricing": "Pricing",
}


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


class _Form:
    """Shared state while a section's form is built: the posted text and which rows were added or removed."""

    def __init__(self, posted: Mapping[str, str] | None, removed: Iterable[str], add: str):
        self.posted = dict(posted or {})
        self.removed = set(removed)
        self.add = add

    def input(self, path: str, label: str, value, **kw) -> Input:
        shown = self.posted[path] if path in self.posted else _text(value)
        return Input(path=path, label=label, value=shown, **kw)

    def new_keys(self, prefix: str) -> list[str]:
        """The `+n` keys of rows added under `prefix`: those posted, and one more when "add a row" asked."""
        keys = sorted({_new_key(p, prefix) for p in self.posted} - {None}, key=lambda k: int(k[1:]))
        if self.add == prefix:
            keys.append(f"{NEW}{(int(keys[-1][1:]) if keys else 0) + 1}")
        return keys


def _new_key(path: str, prefix: str) -> str | None:
    for opener in ("[" + NEW, '["' + NEW):
        if path.startswith(prefix + opener):
            rest = path[len(prefix) + len(opener):]
            digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
            if digits:
                return NEW + digits
    return None


def _keyed_table(form: _Form, title: str, prefix: str, items: list, key_of, columns: list[tuple[str, str, dict]],
                 extra=None, extra_columns: list[str] = (), hint: str = "") -> Table:
    """Rows of a named list (tenants, quotas, ...): one input per column, added rows at the end."""
    rows = []
    keys = [(key_of(item), item) for item in items] + [(k, None) for k in form.new_keys(prefix)]
    for key, item in keys:
        path = join(prefix, Key(key))
        cells: list[Input | str] = [
            form.input(join(path, name), label, getattr(item, attr(name), None) if item is not None else None, **kw)
            for name, label, kw in columns]
        cells += extra(item) if extra else []
        rows.append(Row(path=path, cells=cells, new=item is None, removed=path in form.removed))
    return Table(title=title, prefix=prefix, columns=[label for _, label, _ in columns] + list(extra_columns), rows=rows,
                 hint=hint)


def _map_table(form: _Form, title: str, prefix: str, entries: Mapping, key_label: str,
               columns: list[tuple[str, str, dict]], value_of, hint: str = "") -> Table:
    """Rows of a mapping (GPU prices, a node's MIG layout): the key fixed for existing rows, typed for new ones."""
    rows = []
    for key, entry in list(entries.items()) + [(k, None) for k in form.new_keys(prefix)]:
        path = join(prefix, key)
        first: Input | str = form.input(join(path, NAME), key_label, "") if entry is None else key
        cells = [first] + [form.input(join(path, name), label, value_of(entry, name) if entry is not None else None, **kw)
                           for name, label, kw in columns]
        rows.append(Row(path=path, cells=cells, new=entry is None, removed=path in form.removed))
    return Table(title=title, prefix=prefix, columns=[key_label] + [label for _, label, _ in columns], rows=rows, hint=hint)


def attr(name: str) -> str:
    return "klass" if name == "class" else name


def _number(step: str = "1", **kw) -> dict:
    return {"kind": "number", "step": step, **kw}


def _select(options: list[str], **kw) -> dict:
    return {"kind": "select", "options": options, **kw}


def _gpus(n) -> str:
    return f"{Decimal(n).quantize(Decimal('0.1'))}"


def _quotas(form: _Form, doc: PolicyDocument, use: Mapping[tuple[str, str], PoolUse]) -> list[Table | Group]:
    capacity = {p.name: len(p.nodes) * p.gpus_per_node for p in doc.pools}

    def actual(q) -> list[str]:
        if q is None:
            return ["", "", ""]
        u = use.get((q.tenant, q.pool))
        return [_gpus(u.peak_gpus) if u else "no use", _gpus(u.mean_gpus) if u else "no use", str(capacity.get(q.pool, "?"))]

    columns = [("tenant", "Tenant", _select([t.name for t in doc.tenants])),
               ("pool", "Pool", _select([p.name for p in doc.pools])),
               ("guaranteed_gpus", "Guaranteed GPUs", _number()),
               ("borrowing_limit", "Borrowing limit", _number()),
               ("lending_limit", "Lending limit", _number())]
    return [_keyed_table(form, "Quotas", "quotas", doc.quotas, lambda q: f"{q.tenant}/{q.pool}", columns, extra=actual,
                         extra_columns=[f"Peak GPUs ({USE_DAYS} d)", f"Mean GPUs ({USE_DAYS} d)", "Pool GPUs"],
                         hint="Peak: the busiest hour's GPUs; mean over the hours measured. Guaranteed GPUs of a pool "
                              "must fit its GPUs; lending at most the guarantee.")]


def _priorities(form: _Form, doc: PolicyDocument) -> list[Table | Group]:
    columns = [("name", "Tier", {}), ("value", "Value", _number()), ("class", "Class", _select(CLASSES)),
               ("preemptible", "Preemptible", _select(YES_NO))]
    return [_keyed_table(form, "Priority tiers", "priorities", doc.priorities, lambda t: t.name, columns,
                         hint="Listed highest first; inference above training above preprocessing; inference is never preemptible.")]


def _tenants(form: _Form, doc: PolicyDocument) -> list[Table | Group]:
    def weights(tenant) -> list[Input | str]:
        if tenant is None:
            return ["save first" for _ in doc.pools]
        return [form.input(path_of("pools", Key(p.name), "reservations", tenant.name), f"Reservation in {p.name}",
                           p.reservations.get(tenant.name), kind="number", step="any", hint="weight")
                for p in doc.pools]

    columns = [("name", "Tenant", {}), ("department", "Department", {}), ("class", "Class", _select(CLASSES)),
               ("namespaces", "Namespaces", {"kind": "list"})]
    return [_keyed_table(form, "Tenants", "tenants", doc.tenants, lambda t: t.name, columns, extra=weights,
                         extra_columns=[f"Weight in {p.name}" for p in doc.pools],
                         hint="Namespaces: comma-separated. Reservation weights (inference tenants only) share each "
                              "pool's reserved fraction; empty means none.")]


def _pools(form: _Form, doc: PolicyDocument) -> list[Table | Group]:
    columns = [("name", "Pool", {}), ("nodes", "Nodes", {"kind": "list"}), ("gpus_per_node", "GPUs per node", _number()),
               ("gpu_model", "GPU model", _select(["", *doc.pricing.gpu_models])),
               ("reserved_fraction", "Reserved fraction", _number("0.01")),
               ("time_sliced_nodes", "Time-sliced nodes", {"kind": "list"})]
    # The cluster column only where there is a choice (several clusters, or a document that already names one).
    clusters = list(dict.fromkeys([*get_settings().cluster_names(), *doc.clusters()]))
    hint = "Nodes: comma-separated. An empty GPU model means the only priced model."
    if len(clusters) > 1:
        columns.insert(1, ("cluster", "Cluster", _select(clusters)))
        hint += " A node name means that cluster's node: the same name in two clusters is two nodes."
    return [_keyed_table(form, "Pools", "pools", doc.pools, lambda p: p.name, columns, hint=hint)]


def _sla(form: _Form, doc: PolicyDocument) -> list[Table | Group]:
    columns = [("service", "Service", {}),
               ("tenant", "Tenant", _select([t.name for t in doc.tenants if t.klass == "inference"])),
               ("pool", "Pool", _select([p.name for p in doc.pools])), ("requests", "Requests counter", {}),
               ("latency_histogram", "Latency histogram", {}), ("p99_ms", "P99 red line (ms)", _number("any")),
               ("penalty_per_breach_minute", f"Penalty per breach minute ({doc.pricing.currency})", _number("0.01"))]
    return [_keyed_table(form, "SLA services", "sla", doc.sla, lambda s: s.service, columns)]


def _pricing(form: _Form, doc: PolicyDocument) -> list[Table | Group]:
    p = doc.pricing
    money = _number("any")
    scalars = Group("Prices", [
        form.input("pricing.currency", "Currency", p.currency),
        form.input("pricing.energy_price_per_kwh", f"Energy price per kWh ({p.currency})", p.energy_price_per_kwh, **money),
        form.input("pricing.pue", "PUE", p.pue, **_number("0.01")),
        form.input("pricing.dark_time_multiplier", "Dark-time multiplier", p.dark_time_multiplier, **_number("0.01")),
    ])
    columns = [("purchase_price", f"Purchase price ({p.currency})", money), ("depreciation_years", "Depreciation (years)", money),
               ("hosting_per_hour", f"Hosting per hour ({p.currency})", money), ("default_power_watts", "Default power (W)", money)]
    models = _map_table(form, "GPU models", "pricing.gpu_models", p.gpu_models, "Model (as dcgm-exporter names it)",
                        columns, lambda entry, name: getattr(entry, name))
    return [scalars, models]


def _isolation(form: _Form, doc: PolicyDocument) -> list[Table | Group]:
    iso = doc.isolation
    blocks: list[Table | Group] = [
        Group("Inference", [
            form.input("isolation.inference.memory_reserve_factor", "Memory reserve factor", iso.inference.memory_reserve_factor,
                       **_number("0.1")),
            form.input("isolation.inference.memory_buffer_fraction", "Memory buffer fraction", iso.inference.memory_buffer_fraction,
                       **_number("0.01")),
            form.input("isolation.inference.cpu_pinning", "CPU pinning", iso.inference.cpu_pinning),
            form.input("isolation.inference.numa_affinity", "NUMA affinity", iso.inference.numa_affinity, **_select(YES_NO)),
        ], hint="The reserve must cover at least 1.2x the measured peak GPU memory."),
        Group("Training", [
            form.input("isolation.training.network_cap_fraction", "Network cap fraction", iso.training.network_cap_fraction,
                       **_number("0.01")),
            form.input("isolation.training.cpu_policy", "CPU policy", iso.training.cpu_policy),
        ], hint="A network cap above 0.7 may starve inference."),
    ]
    for pool in doc.pools:
        prefix = path_of("isolation", "node_taints", pool.name)
        columns = [("key", "Key", {}), ("value", "Value", {}), ("effect", "Effect", _select(EFFECTS))]
        blocks.append(_keyed_table(form, f"Taints of pool {pool.name}", prefix, iso.node_taints.get(pool.name, []),
                                   lambda t: f"{t.key}:{t.effect}", columns))
    for node, layout in iso.mig.items():
        base = path_of("isolation", "mig", node)
        pool = doc.pool_for_node(node)
        model = layout.model or (pool_model(doc, pool) if pool else None) or ""
        allowed = list(gpus.profiles(model))
        blocks.append(Group(f"MIG layout of {node}", [
            form.input(join(base, "mode"), "Mode", layout.mode, **_select(["mixed", "single"])),
            form.input(join(base, "model"), "GPU model", layout.model, **_select(["", *doc.pricing.gpu_models])),
        ], hint=f"{model or 'unknown model'}: profiles {', '.join(allowed) or 'none (no MIG)'}", remove=base))
        columns = [(profile, profile, _number()) for profile in allowed]
        blocks.append(_map_table(form, f"GPUs of {node}", join(base, "gpus"), layout.gpus, "GPUs (index or range)", columns,
                                 lambda entry, name: entry.get(name),
                                 hint="Count of each profile per GPU; empty means none."))
    candidates = [n for p in doc.pools for n in p.nodes if n not in iso.mig and gpus.supports_mig(pool_model(doc, p) or "")]
    new = form.new_keys(path_of("isolation", "mig"))
    if candidates or new:
        base = path_of("isolation", "mig", (new or [f"{NEW}1"])[0])
        blocks.append(Group("Add a MIG layout", [
            form.input(join(base, NAME), "Node", "", **_select(["", *candidates])),
            form.input(join(base, "gpus"), "", "{}", kind="hidden"),
        ], hint="Choose a node, save, then lay out its GPUs."))
    return blocks


def use_last_month(*, session: Session) -> dict[tuple[str, str], PoolUse]:
    """Peak and mean GPUs per (tenant, pool) over the last USE_DAYS days."""
    end = floor_hour(utcnow())
    return pool_use(session=session, start=end - timedelta(days=USE_DAYS), end=end, tenants=None)


def build(name: str, doc: PolicyDocument, *, posted: Mapping[str, str] | None = None, removed: Iterable[str] = (),
          add: str = "", findings: Iterable[FieldError] = (), use: Mapping[tuple[str, str], PoolUse] | None = None) -> Section:
    """The section's form from the draft `doc`, with the posted text kept and each finding placed at its input."""
    form = _Form(posted, removed, add)
    builders = {"quotas": lambda: _quotas(form, doc, use or {}), "priorities": lambda: _priorities(form, doc),
                "tenants": lambda: _tenants(form, doc), "pools": lambda: _pools(form, doc),
                "isolation": lambda: _isolation(form, doc), "sla": lambda: _sla(form, doc),
                "pricing": lambda: _pricing(form, doc)}
    section = Section(name=name, title=SECTIONS[name], blocks=builders[name]())
    _place(section, [f for f in findings if f.severity == "error"])
    return section


def _place(section: Section, errors: list[FieldError]) -> None:
    """Each error at the input of its path, else at the row it is in, else in the list above the form."""
    inputs: dict[str, Input] = {}
    rows: dict[str, Row] = {}
    for block in section.blocks:
        for cell in (c for r in block.rows for c in r.cells) if isinstance(block, Table) else block.inputs:
            if isinstance(cell, Input):
                inputs[cell.path] = cell
        if isinstance(block, Table):
            rows.update({r.path: r for r in block.rows})
    for error in errors:
        if error.path in inputs:
            inputs[error.path].errors.append(error.message)
            continue
        row = next((r for p, r in sorted(rows.items(), key=lambda i: -len(i[0])) if within(error.path, p)), None)
        if row is not None:
            where = "" if error.path == row.path else error.path[len(row.path):].lstrip(".") + ": "
            row.errors.append(where + error.message)
        elif any(within(error.path, parent(p)) for p in inputs):
            section.other_errors.append(error)

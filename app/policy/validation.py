"""Cross-field validation of the policy document (SPEC section 3); parsing is in `parsing.py`.

Every problem is a FieldError whose path is named as the diff names it (`paths.py`): named items
by key, mapping keys after a dot or quoted (`tenants[search].namespaces[0]`,
`pools[mixed-a100].reservations.search`, `isolation.mig["gpu-a100-02"].gpus["0-3"]`).

GPU model of a node or pool: a MIG node's `model`, else its pool's `gpu_model`, else the only
model priced in `pricing.gpu_models`; when none of those resolves it, the layout cannot be
checked and that is an error (name the model). A pool's GPUs are `len(nodes) * gpus_per_node`.

An inference tenant's memory reserve is its weighted share of each pool's reserved fraction:
reserved_fraction x pool GPUs x GPU memory x weight / sum of weights, summed over pools.
`eviction_order` steps name a training/preprocessing tier, tenant or class, or an action
(shrink-training-batch, suspend-training); inference is never a step.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from decimal import Decimal
from zoneinfo import ZoneInfo

from app.core.clusters import DEFAULT_CLUSTER
from app.core.errors import FieldError
from app.core.safe_text import FORMULA_START, control_problem
from app.policy import gpus
from app.policy.document import RESERVED_TENANT_NAMES, UNPOOLED, PolicyDocument, Pool
from app.policy.paths import item_paths, named, path_of
from app.policy.red_lines import red_line_finding

RANK = {"inference": 2, "training": 1, "preprocessing": 0}
EVICTION_ACTIONS = ("shrink-training-batch", "suspend-training")
MIN_RESERVE_FACTOR = Decimal("1.2")
NETWORK_CAP_WARN = Decimal("0.7")
MAX_NUMBER = 10**12
MAX_P99_MS = 600_000  # a P99 red line above ten minutes is a typo, not a latency objective
GPU_RANGE_RE = re.compile(r"^\s*([0-9]{1,4})\s*(?:-\s*([0-9]{1,4})\s*)?$")


class _Report:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.items.append(FieldError(path, message, "error"))

    def warning(self, path: str, message: str) -> None:
        self.items.append(FieldError(path, message, "warning"))

    def fraction(self, path: str, value: Decimal) -> None:
        if not (0 <= value <= 1):
            self.error(path, "must be between 0 and 1")


# Latency histogram selector -> its finite bucket boundaries (seconds) as the metrics store has them; None: unknown.
LatencyBuckets = Callable[[str], Sequence[Decimal] | None]


def validate(doc: PolicyDocument, *, measured_peak_mib: dict[str, float] | None = None,
             latency_buckets: LatencyBuckets | None = None, clusters: Sequence[str] | None = None) -> list[FieldError]:
    """All cross-field problems of a parsed document, errors and warnings, each with its field path.

    `clusters`: the cluster names pools may name (default: the configured ones, CHARGEBACK_CLUSTERS).
    """
    report = _Report()
    if clusters is None:
        from app.core.settings import get_settings

        clusters = get_settings().cluster_names()
    _magnitudes(doc, report)
    _exported_names(doc, report)
    _tenants(doc, report)
    _pools(doc, report, clusters)
    _pricing(doc, report)
    _slas(doc, report)
    _sla_buckets(doc, report, latency_buckets)
    _colocation(doc, report)
    _priorities(doc, report)
    _eviction_order(doc, report)
    _quotas(doc, report)
    _mig(doc, report)
    _isolation(doc, report)
    _memory_reserve(doc, report, measured_peak_mib)
    return report.items


def tenant_paths(doc: PolicyDocument) -> list[str]:
    return item_paths("tenants", [t.name for t in doc.tenants])


def pool_paths(doc: PolicyDocument) -> list[str]:
    return item_paths("pools", [p.name for p in doc.pools])


def sla_paths(doc: PolicyDocument) -> list[str]:
    return item_paths("sla", [s.service for s in doc.sla])


def priority_paths(doc: PolicyDocument) -> list[str]:
    return item_paths("priorities", [t.name for t in doc.priorities])


def quota_paths(doc: PolicyDocument) -> list[str]:
    return item_paths("quotas", [f"{q.tenant}/{q.pool}" for q in doc.quotas])


def _decimals(node, loc: tuple[str | int, ...] = ()):
    if isinstance(node, dict):
        for key, item in node.items():
            yield from _decimals(item, (*loc, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _decimals(item, (*loc, i))
    elif isinstance(node, Decimal):
        yield loc, node


def _magnitudes(doc: PolicyDocument, report: _Report) -> None:
    # Money and weights far beyond any real fleet would overflow Decimal arithmetic downstream.
    data = doc.model_dump(mode="python", by_alias=True)
    for loc, value in _decimals(data):
        if abs(value) >= MAX_NUMBER:
            report.error(named(data, loc), f"{value} is too large (limit {MAX_NUMBER:,})")


def _exported_names(doc: PolicyDocument, report: _Report) -> None:
    # These names become cells of the CSV/FOCUS exports; the exports neutralise them anyway, but a
    # name a spreadsheet would run as a formula is refused where a reviewer can see why.
    tenants, pools, slas, priorities = tenant_paths(doc), pool_paths(doc), sla_paths(doc), priority_paths(doc)
    names = [(path_of(tenants[i], "department"), t.department) for i, t in enumerate(doc.tenants)]
    names += [(path_of(pools[i], "name"), p.name) for i, p in enumerate(doc.pools)]
    names += [(path_of(slas[i], "service"), s.service) for i, s in enumerate(doc.sla)]
    names += [(path_of(priorities[i], "name"), p.name) for i, p in enumerate(doc.priorities)]
    for at, name in names:
        # A control or line-separator character (U+2028, NEL...) would also end a mail header early: a
        # department name is the subject of its budget mail.
        if problem := control_problem(name):
            report.error(at, problem)
        elif name.startswith(FORMULA_START):
            report.error(at, "must not start with = + - @ (spreadsheets would run it as a formula)")


def _tenants(doc: PolicyDocument, report: _Report) -> None:
    names: dict[str, int] = {}
    owner: dict[str, str] = {}
    classes = {p.klass for p in doc.priorities}
    at = tenant_paths(doc)
    for i, tenant in enumerate(doc.tenants):
        if tenant.name in names:
            report.error(path_of(at[i], "name"), f"duplicate tenant name '{tenant.name}' (first at tenants[{names[tenant.name]}])")
        names.setdefault(tenant.name, i)
        if tenant.name in RESERVED_TENANT_NAMES:
            report.error(path_of(at[i], "name"), f"'{tenant.name}' is reserved for {RESERVED_TENANT_NAMES[tenant.name]}")
        for k, ns in enumerate(tenant.namespaces):
            if ns in owner:
                other = owner[ns]
                message = f"namespace '{ns}' is listed twice" if other == tenant.name else f"namespace '{ns}' is already claimed by tenant '{other}'"
                report.error(path_of(at[i], "namespaces", k), message)
            owner.setdefault(ns, tenant.name)
        if tenant.klass not in classes:
            report.error(path_of(at[i], "class"), f"no priority tier has class '{tenant.klass}'")


def pool_model(doc: PolicyDocument, pool: Pool) -> str | None:
    """The pool's GPU model: its `gpu_model`, else the only priced model, else None."""
    if pool.gpu_model:
        return pool.gpu_model
    return next(iter(doc.pricing.gpu_models)) if len(doc.pricing.gpu_models) == 1 else None


def _pools(doc: PolicyDocument, report: _Report, clusters: Sequence[str]) -> None:
    names: dict[str, int] = {}
    # Node names are per cluster: the same name in two clusters is two nodes.
    node_pool: dict[tuple[str, str], str] = {}
    several = doc.clusters() != [DEFAULT_CLUSTER]
    paths = pool_paths(doc)
    for i, pool in enumerate(doc.pools):
        if pool.name in names:
            report.error(path_of(paths[i], "name"), f"duplicate pool name '{pool.name}' (first at pools[{names[pool.name]}])")
        names.setdefault(pool.name, i)
        if pool.name == UNPOOLED:
            report.error(path_of(paths[i], "name"), f"'{UNPOOLED}' is reserved for GPUs on nodes no pool names")
        if pool.cluster not in clusters:
            report.error(path_of(paths[i], "cluster"), f"unknown cluster '{pool.cluster}' (configured: {', '.join(clusters)})")
        for k, node in enumerate(pool.nodes):
            other = node_pool.get((pool.cluster, node))
            if other is not None:
                message = (f"node '{node}' is listed twice" if other == pool.name
                           else f"node '{node}' is already in pool '{other}'"
                           + (f" of cluster '{pool.cluster}'" if several else ""))
                report.error(path_of(paths[i], "nodes", k), message)
            node_pool.setdefault((pool.cluster, node), pool.name)
        for k, node in enumerate(pool.time_sliced_nodes):
            if node not in pool.nodes:
                report.error(path_of(paths[i], "time_sliced_nodes", k), f"node '{node}' is not in this pool's nodes")
        report.fraction(path_of(paths[i], "reserved_fraction"), pool.reserved_fraction)
        if pool.gpus_per_node < 1:
            report.error(path_of(paths[i], "gpus_per_node"), "must be at least 1")
        if pool.gpu_model is not None and pool.gpu_model not in doc.pricing.gpu_models:
            report.error(path_of(paths[i], "gpu_model"), f"'{pool.gpu_model}' is not priced in pricing.gpu_models")
        for name, weight in pool.reservations.items():
            at = path_of(paths[i], "reservations", name)
            tenant = doc.tenant(name)
            if tenant is None:
                report.error(at, f"unknown tenant '{name}'")
            elif tenant.klass != "inference":
                report.error(at, f"tenant '{name}' is {tenant.klass}: only inference tenants hold reservations")
            if weight < 0:
                report.error(at, "weight must be at least 0")


def _pricing(doc: PolicyDocument, report: _Report) -> None:
    report.fraction("pricing.dark_time_multiplier", doc.pricing.dark_time_multiplier)
    for model in doc.pricing.gpu_models:
        if gpus.lookup(model) is None:
            report.warning(path_of("pricing", "gpu_models", model), f"'{model}' is not in the GPU catalogue: treated as a whole GPU without MIG")


def _slas(doc: PolicyDocument, report: _Report) -> None:
    services: dict[str, int] = {}
    paths = sla_paths(doc)
    for i, sla in enumerate(doc.sla):
        if sla.service in services:
            report.error(path_of(paths[i], "service"), f"duplicate service '{sla.service}' (first at sla[{services[sla.service]}])")
        services.setdefault(sla.service, i)
        tenant = doc.tenant(sla.tenant)
        if tenant is None:
            report.error(path_of(paths[i], "tenant"), f"unknown tenant '{sla.tenant}'")
        elif tenant.klass != "inference":
            report.error(path_of(paths[i], "tenant"), f"tenant '{sla.tenant}' is {tenant.klass}: SLAs apply to inference tenants")
        if doc.pool(sla.pool) is None:
            report.error(path_of(paths[i], "pool"), f"unknown pool '{sla.pool}'")
        if not (0 < sla.p99_ms <= MAX_P99_MS):
            report.error(path_of(paths[i], "p99_ms"), f"must be above 0 and at most {MAX_P99_MS} ms")
        if sla.penalty_per_breach_minute < 0:
            report.error(path_of(paths[i], "penalty_per_breach_minute"), "must be at least 0")


def _sla_buckets(doc: PolicyDocument, report: _Report, latency_buckets: LatencyBuckets | None) -> None:
    # A red line inside a bucket leaves every minute whose P99 lands there unresolved (not billed).
    if latency_buckets is None:
        return
    paths = sla_paths(doc)
    for i, sla in enumerate(doc.sla):
        bounds = latency_buckets(sla.latency_histogram)
        finding = red_line_finding(bounds, sla.p99_ms) if bounds else None
        if finding:
            report.warning(path_of(paths[i], "p99_ms"), finding)


def _colocation(doc: PolicyDocument, report: _Report) -> None:
    for i, window in enumerate(doc.colocation.peak_windows):
        try:
            ZoneInfo(window.tz)
        except Exception:  # ZoneInfo raises several types (not found, bad key, bad path)
            report.error(path_of("colocation", "peak_windows", i, "tz"), f"unknown time zone '{window.tz}'")
        if window.start == window.end:
            report.error(path_of("colocation", "peak_windows", i, "end"), "must differ from start")


def _priorities(doc: PolicyDocument, report: _Report) -> None:
    tiers = doc.priorities
    names: dict[str, int] = {}
    values: dict[int, str] = {}
    class_errors: set[int] = set()
    paths = priority_paths(doc)
    for i, tier in enumerate(tiers):
        if tier.name in names:
            report.error(path_of(paths[i], "name"), f"duplicate tier name '{tier.name}' (first at priorities[{names[tier.name]}])")
        names.setdefault(tier.name, i)
        if tier.value in values:
            report.error(path_of(paths[i], "value"), f"value {tier.value} is also used by tier '{values[tier.value]}'")
        values.setdefault(tier.value, tier.name)
        higher = [t for t in tiers if RANK[t.klass] > RANK[tier.klass]]
        if higher:
            lowest = min(higher, key=lambda t: t.value)
            if lowest.value <= tier.value:
                class_errors.add(i)
                report.error(
                    path_of(paths[i], "value"),
                    f"{tier.klass} tier '{tier.name}' ({tier.value}) must be below {lowest.klass} tier '{lowest.name}' ({lowest.value})",
                )
        if tier.klass == "inference" and tier.preemptible:
            report.error(path_of(paths[i], "preemptible"), "inference tiers are never preemptible")
    for i in range(1, len(tiers)):
        prev, tier = tiers[i - 1], tiers[i]
        if tier.value > prev.value and i not in class_errors:
            report.error(
                path_of(paths[i], "value"),
                f"tiers are listed highest first: {tier.value} is above the previous tier '{prev.name}' ({prev.value})",
            )


def _eviction_order(doc: PolicyDocument, report: _Report) -> None:
    inference = {"inference"} | {t.name for t in doc.priorities if t.klass == "inference"}
    inference |= {t.name for t in doc.tenants if t.klass == "inference"}
    known = {"training", "preprocessing", *EVICTION_ACTIONS}
    known |= {t.name for t in doc.priorities if t.klass != "inference"}
    known |= {t.name for t in doc.tenants if t.klass != "inference"}
    seen: set[str] = set()
    for i, step in enumerate(doc.eviction_order):
        at = path_of("eviction_order", i)
        if step in seen:
            report.error(at, f"'{step}' is listed twice")
        elif step in inference:
            report.error(at, f"'{step}' is inference: inference is never evicted")
        elif step not in known:
            report.error(
                at,
                f"unknown eviction step '{step}': name a training or preprocessing tier or tenant, "
                f"or one of {', '.join(EVICTION_ACTIONS)}",
            )
        seen.add(step)


def _quotas(doc: PolicyDocument, report: _Report) -> None:
    seen: set[tuple[str, str]] = set()
    totals: dict[str, int] = defaultdict(int)
    last: dict[str, int] = {}
    paths = quota_paths(doc)
    for i, quota in enumerate(doc.quotas):
        if doc.tenant(quota.tenant) is None:
            report.error(path_of(paths[i], "tenant"), f"unknown tenant '{quota.tenant}'")
        if doc.pool(quota.pool) is None:
            report.error(path_of(paths[i], "pool"), f"unknown pool '{quota.pool}'")
        key = (quota.tenant, quota.pool)
        if key in seen:
            report.error(paths[i], f"a second quota for tenant '{quota.tenant}' in pool '{quota.pool}'")
        seen.add(key)
        if quota.lending_limit > quota.guaranteed_gpus:
            report.error(path_of(paths[i], "lending_limit"), f"lending_limit {quota.lending_limit} exceeds guaranteed_gpus {quota.guaranteed_gpus}")
        totals[quota.pool] += quota.guaranteed_gpus
        last[quota.pool] = i
    for name, total in totals.items():
        pool = doc.pool(name)
        if pool is None:
            continue
        capacity = len(pool.nodes) * pool.gpus_per_node
        if total > capacity:
            report.error(
                path_of(paths[last[name]], "guaranteed_gpus"),
                f"guaranteed GPUs in pool '{name}' sum to {total}, above its {capacity} GPUs "
                f"({len(pool.nodes)} nodes x {pool.gpus_per_node})",
            )


def _gpu_range(key: str) -> tuple[int, int] | None:
    match = GPU_RANGE_RE.match(key)
    if not match:
        return None
    lo = int(match.group(1))
    hi = int(match.group(2)) if match.group(2) is not None else lo
    return lo, hi


def _mig_model(doc: PolicyDocument, node: str, model: str | None, report: _Report) -> str | None:
    base = path_of("isolation", "mig", node)
    if model is not None:
        if model not in doc.pricing.gpu_models:
            report.error(path_of(base, "model"), f"'{model}' is not priced in pricing.gpu_models")
            return None
        return model
    pool = doc.pool_for_node(node)
    if pool is not None and pool.gpu_model:
        return pool.gpu_model if pool.gpu_model in doc.pricing.gpu_models else None  # reported at the pool
    if len(doc.pricing.gpu_models) == 1:
        return next(iter(doc.pricing.gpu_models))
    report.error(path_of(base, "model"), f"pricing lists {len(doc.pricing.gpu_models)} GPU models: name this node's model")
    return None


def _mig(doc: PolicyDocument, report: _Report) -> None:
    for node, layout in doc.isolation.mig.items():
        base = path_of("isolation", "mig", node)
        pool = doc.pool_for_node(node)
        if pool is None:
            report.error(base, f"node '{node}' is not in any pool")
        in_clusters = sorted({p.cluster for p in doc.pools if node in p.nodes})
        if len(in_clusters) > 1:
            report.warning(base, f"node '{node}' is in pools of clusters {', '.join(in_clusters)}: this layout applies "
                                 "to the node of that name in each of them")
        model_name = _mig_model(doc, node, layout.model, report)
        if model_name is None:
            continue
        model = gpus.lookup(model_name)
        if model is None or not model.mig:
            reason = "is not a known MIG-capable GPU" if model is None else "does not support MIG"
            report.error(base, f"{model_name} {reason}")
            continue
        per_node = pool.gpus_per_node if pool else 8
        taken: dict[int, str] = {}
        used_profiles: set[str] = set()
        for key, profiles in layout.gpus.items():
            at = path_of(base, "gpus", key)
            bounds = _gpu_range(key)
            if bounds is None:
                report.error(at, f"'{key}' is not a GPU index or range like '0-3'")
            elif bounds[0] > bounds[1]:
                report.error(at, f"range '{key}' runs backwards")
            elif bounds[1] >= per_node:
                report.error(at, f"GPU {bounds[1]} is beyond the node's {per_node} GPUs (0-{per_node - 1})")
            else:
                clash = sorted({taken[g] for g in range(bounds[0], bounds[1] + 1) if g in taken})
                if clash:
                    report.error(at, f"GPUs overlap with '{clash[0]}'")
                for g in range(bounds[0], bounds[1] + 1):
                    taken.setdefault(g, key)
            _mig_layout(model_name, model, at, profiles, report)
            used_profiles.update(profiles)
        if layout.mode == "single" and len(used_profiles) > 1:
            report.error(path_of(base, "mode"), f"single mode uses one profile on every GPU; found {', '.join(sorted(used_profiles))}")


def _mig_layout(model_name: str, model: gpus.GpuModel, at: str, profiles: dict[str, int], report: _Report) -> None:
    if not profiles:
        report.error(at, "no profiles: leave whole GPUs out of the layout")
        return
    compute = memory = media = 0
    for profile, count in profiles.items():
        if profile not in model.profiles:
            report.error(at, f"{profile} is not a profile of {model_name}")
            continue
        if count < 1:
            report.error(at, f"{profile}: count must be at least 1")
            continue
        k, m = model.profile_slices(profile)
        compute += k * count
        memory += m * count
        media += count if profile.endswith("+me") else 0
    if compute > model.slices:
        report.error(at, f"profiles use {compute} compute slices per GPU, above the {model.slices} of {model_name}")
    elif memory > model.memory_slices:
        report.error(at, f"profiles use {memory} memory slices per GPU, above the {model.memory_slices} of {model_name}")
    if media > 1:
        report.error(at, "at most one +me instance per GPU")


def _isolation(doc: PolicyDocument, report: _Report) -> None:
    inference, training = doc.isolation.inference, doc.isolation.training
    if inference.memory_reserve_factor < MIN_RESERVE_FACTOR:
        report.error("isolation.inference.memory_reserve_factor", f"must be at least {MIN_RESERVE_FACTOR}")
    report.fraction("isolation.inference.memory_buffer_fraction", inference.memory_buffer_fraction)
    report.fraction("isolation.training.network_cap_fraction", training.network_cap_fraction)
    if NETWORK_CAP_WARN < training.network_cap_fraction <= 1:
        report.warning(
            "isolation.training.network_cap_fraction",
            f"{training.network_cap_fraction} is above {NETWORK_CAP_WARN}: training may starve inference of network",
        )
    for key in doc.isolation.node_taints:
        if doc.pool(key) is None:
            report.error(path_of("isolation", "node_taints", key), f"unknown pool '{key}'")


def _memory_reserve(doc: PolicyDocument, report: _Report, measured: dict[str, float] | None) -> None:
    """An inference tenant's reserved GPU memory must cover 1.2x (the policy's factor) its measured peak."""
    if measured is None:
        report.warning(
            "isolation.inference.memory_reserve_factor",
            "no measured peak memory (DCGM_FI_DEV_FB_USED, last 7 days): the inference reserve is not checked against it",
        )
        return
    factor = doc.isolation.inference.memory_reserve_factor
    tenants, pools = tenant_paths(doc), pool_paths(doc)
    for i, tenant in enumerate(doc.tenants):
        if tenant.klass != "inference":
            continue
        peak = measured.get(tenant.name)
        if peak is None:
            report.warning(tenants[i], f"no measured peak memory for '{tenant.name}': its reserve is not checked")
            continue
        reserved, first_path, sized = 0.0, tenants[i], True
        for j, pool in enumerate(doc.pools):
            weight = pool.reservations.get(tenant.name)
            total = sum((w for w in pool.reservations.values() if w > 0), Decimal(0))
            if weight is None or weight <= 0 or total <= 0:
                continue
            if first_path.startswith("tenants"):
                first_path = path_of(pools[j], "reservations", tenant.name)
            model = gpus.lookup(pool_model(doc, pool) or "")
            if model is None:
                sized = False
                report.warning(path_of(pools[j], "gpu_model"), "unknown GPU model: the inference memory reserve cannot be sized")
                continue
            try:
                share = float(pool.reserved_fraction * weight / total)
            except ArithmeticError:  # absurd weights are reported by _magnitudes
                continue
            reserved += share * len(pool.nodes) * pool.gpus_per_node * model.memory_mib
        if not sized:
            continue
        message = f"'{tenant.name}' reserves {reserved:.0f} MiB of GPU memory, below {{f}} x its measured peak {peak:.0f} MiB"
        if reserved < float(MIN_RESERVE_FACTOR) * peak:
            report.error(first_path, message.format(f=MIN_RESERVE_FACTOR))
        elif reserved < float(factor) * peak:
            report.warning(first_path, message.format(f=factor))

"""Benchmark: rate and close one month of rollups (500 tenants, 40 pools, 8,192 GPUs) on PostgreSQL.

Run:  .venv/bin/python benchmarks/rating.py [--tenants 500 --pools 40 --gpus 8192 --month 2026-10] [--scale N]
      (--scale 10: 5,000 tenants, 7.44M usage rows; --generate-only / --db URL to generate once and rate it
      again; --no-close to skip the two closes, which issue one invoice PDF per tenant)

Creates a throwaway database on the server in CHARGEBACK_BENCH_PG_URL (default the local test
server), loads the rollups with COPY in a child process (so the parent's peak RSS is that of
rating and closing only), then times, in the same run:
  baseline  one SQL GROUP BY over the month's usage rollups (what reading the inputs costs)
  store     each pool-hour's rate stored once (`hour_rates.store_missing`, what the worker's task does
            after each ingested hour), committed: paid at ingestion, not by the rating
  load      streaming the month through the loader (RatingHour objects) without rating
  rate      `periods.rate` (the SQL path `rating_sql.rate_stored` + store lines), committed
  SQL path  `rating_sql.rate_stored` alone (sums of the stored rates), then the reference `rate_period` over `load_hours` alone,
            their results compared (they must be equal)
  close     `periods.close`, the finalize step (re-rate + store lines + status + audit), committed
  issue     the worker's issuing step (`issuing.issue_period`): every document rendered from the stored
            lines (CSV, FOCUS, period PDF, each tenant's invoice PDF, report PDF), stored, hashes set,
            `period.finalized` emitted, committed
and prints each relative to the baseline and each step's RSS at its start and its own peak (the high-water mark
reset before it), plus the CPU of one invoice PDF from the full fonts and from the issuing run's cut-down fonts
(same bytes, checked).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, text

ADMIN_URL = os.environ.get("CHARGEBACK_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MODEL = "NVIDIA H100 80GB HBM3"
GPUS_PER_NODE = 8


def _psycopg(url: str) -> str:
    return "postgresql+psycopg://" + url.split("://", 1)[1]


def create_database() -> str:
    name = f"cbbench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(_psycopg(ADMIN_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    admin = create_engine(_psycopg(ADMIN_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    admin.dispose()


class Fleet:
    """Who lives where: tenants by class, pools with their GPU counts, home pools, SLA services."""

    def __init__(self, tenants: int, pools: int, gpus: int, seed: int = 7):
        rng = random.Random(seed)
        self.pool_names = [f"pool-{j:02d}" for j in range(pools)]
        base, extra = divmod(gpus, pools)
        self.pool_gpus = {p: base + (1 if j < extra else 0) for j, p in enumerate(self.pool_names)}
        n_inf, n_pre = tenants // 5, tenants // 5
        self.tenants = []  # (name, class, department)
        for i in range(tenants):
            klass = "inference" if i < n_inf else ("preprocessing" if i >= tenants - n_pre else "training")
            self.tenants.append((f"t{i:03d}", klass, f"dept-{i % 20:02d}"))
        self.homes: dict[str, list[str]] = {}
        for i, (name, klass, _) in enumerate(self.tenants):
            first = self.pool_names[i % pools]
            if klass == "inference":  # inference spans two pools; the others live in one
                self.homes[name] = [first, self.pool_names[(i * 7 + 3) % pools]]
                if self.homes[name][1] == first:
                    self.homes[name] = [first]
            else:
                self.homes[name] = [first]
        self.in_pool: dict[str, list[tuple[str, str]]] = {p: [] for p in self.pool_names}
        for name, klass, _ in self.tenants:
            for p in self.homes[name]:
                self.in_pool[p].append((name, klass))
        self.services = [(f"svc-{name}", name, self.homes[name][0]) for name, klass, _ in self.tenants if klass == "inference"]
        self.rng = rng

    def policy(self):
        from app.policy.document import PolicyDocument

        pools = []
        for p in self.pool_names:
            nodes = [f"{p}-node-{k:02d}" for k in range(-(-self.pool_gpus[p] // GPUS_PER_NODE))]
            reservations = {t: 1 for t, k in self.in_pool[p] if k == "inference"}
            pools.append({"name": p, "nodes": nodes, "reserved_fraction": "0.30", "reservations": reservations})
        return PolicyDocument.model_validate({
            "tenants": [{"name": n, "department": d, "namespaces": [f"ns-{n}"], "class": k} for n, k, d in self.tenants],
            "pools": pools,
            "pricing": {"currency": "USD", "energy_price_per_kwh": "0.20", "pue": "1.25", "dark_time_multiplier": "0.6",
                        "gpu_models": {MODEL: {"purchase_price": 30000, "depreciation_years": 4,
                                               "hosting_per_hour": "0.35", "default_power_watts": 700}}},
            "sla": [{"service": s, "tenant": t, "pool": p, "requests": f'vllm:request_success_total{{namespace="ns-{t}"}}',
                     "latency_histogram": f'vllm:e2e_request_latency_seconds_bucket{{namespace="ns-{t}"}}',
                     "p99_ms": 300, "penalty_per_breach_minute": "0.50"} for s, t, p in self.services],
            "priorities": [
                {"name": "inference-core", "value": 1000000, "class": "inference", "preemptible": False},
                {"name": "training", "value": 10000, "class": "training", "preemptible": True},
                {"name": "preprocessing", "value": 1000, "class": "preprocessing", "preemptible": True},
            ],
        })


def month_bounds(month: str) -> tuple[datetime, datetime]:
    year, mon = map(int, month.split("-"))
    return datetime(year, mon, 1, tzinfo=UTC), datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)


def generate(url: str, args) -> None:
    """Child process: store the policy and COPY one month of rollups (plus ok ingest hours)."""
    from app.core.db import make_engine, unit_of_work
    from app.policy.service import import_version

    fleet = Fleet(args.tenants, args.pools, args.gpus)
    start, end = month_bounds(args.month)
    engine = make_engine(url)
    with unit_of_work(engine) as s:
        version = import_version(session=s, document=fleet.policy(), actor="bench", effective_from=start - timedelta(days=1)).id
    rng = fleet.rng
    raw = engine.raw_connection()
    conn = raw.driver_connection
    counts = dict.fromkeys(("usage", "pool_hour", "breach_minute", "breach_share"), 0)
    breach_id = 0
    with conn.cursor() as cur:
        with cur.copy("COPY ingest_hour (hour, status, policy_version_id, attempts, last_error, ingested_at, duration_s) FROM STDIN") as cp:
            h = start
            while h < end:
                cp.write_row((h, "ok", version, 1, "", h + timedelta(minutes=2), 1.0))
                h += timedelta(hours=1)
        # one COPY at a time per connection: collect the small tables first
        pool_rows, model_rows = [], []
        h = start
        while h < end:
            for p in fleet.pool_names:
                n = fleet.pool_gpus[p]
                pool_rows.append((h, p, n, Decimal(n * 3600), rng.randint(0, 40), version))
                model_rows.append((h, p, MODEL, n, n - 2, Decimal(n - 2) * Decimal("0.55") + Decimal(rng.randint(0, 999)) / 1000))
            h += timedelta(hours=1)
        counts["pool_hour"] = len(pool_rows)
        with cur.copy("COPY pool_hour (hour, pool, gpus, capacity_gpu_seconds, dark_minutes, policy_version_id) FROM STDIN") as cp:
            for row in pool_rows:
                cp.write_row(row)
        with cur.copy("COPY pool_hour_model (hour, pool, model, gpus, measured_gpus, measured_kwh) FROM STDIN") as cp:
            for row in model_rows:
                cp.write_row(row)
        # text COPY written a pool-hour at a time (write_row per row made generation at --scale 10 the slowest step)
        with cur.copy("COPY usage_rollup (hour, pool, tenant, klass, dark, gpu_seconds, activity_sum, activity_samples, policy_version_id) FROM STDIN") as us:
            h = start
            uniform = rng.uniform
            while h < end:
                stamp = h.isoformat()
                for p in fleet.pool_names:
                    capacity = fleet.pool_gpus[p] * 3600
                    members = fleet.in_pool[p]
                    share = capacity * 0.9 / max(1, len(members))
                    out = []
                    for name, klass in members:
                        used = share * uniform(0.2, 1.0)
                        if klass == "inference":
                            parts = ((False, used),)
                        else:
                            dark = used * uniform(0.1, 0.5)
                            parts = ((False, used - dark), (True, dark))
                        for is_dark, seconds in parts:
                            samples = int(seconds // 30)
                            out.append(f"{stamp}\t{p}\t{name}\t{klass}\t{'t' if is_dark else 'f'}\t{seconds:.6f}\t"
                                       f"{samples * uniform(0.3, 0.9)!r}\t{samples}\t{version}\n")
                    counts["usage"] += len(out)
                    us.write("".join(out))
                h += timedelta(hours=1)
        minutes = int((end - start).total_seconds() // 60)
        minute_rows, share_rows = [], []
        for service, tenant, p in fleet.services:
            colocated = [n for n, k in fleet.in_pool[p] if k != "inference"]
            for m in sorted(rng.sample(range(1, minutes + 1), k=max(1, minutes * 3 // 1000))):
                minute_end = start + timedelta(minutes=m)
                hour = (minute_end - timedelta(microseconds=1)).replace(minute=0, second=0, microsecond=0)
                breach_id += 1
                minute_rows.append((breach_id, hour, service, tenant, p, minute_end, Decimal("450.000")))
                for other in rng.sample(colocated, k=min(3, len(colocated))):
                    share_rows.append((breach_id, other, Decimal(rng.randint(30, 3000))))
        counts["breach_minute"], counts["breach_share"] = len(minute_rows), len(share_rows)
        with cur.copy("COPY breach_minute (id, hour, service, service_tenant, pool, minute_end, p99_ms) FROM STDIN") as cp:
            for row in minute_rows:
                cp.write_row(row)
        with cur.copy("COPY breach_share (breach_id, tenant, gpu_seconds) FROM STDIN") as cp:
            for row in share_rows:
                cp.write_row(row)
        cur.execute("SELECT setval(pg_get_serial_sequence('breach_minute', 'id'), %s)", (breach_id,))
        cur.execute("ANALYZE")
    conn.commit()
    raw.close()
    engine.dispose()
    print("generated: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()), flush=True)


CPU: dict[str, float] = {}
# MiB: each step's RSS as it starts and its own peak (the kernel's high-water mark reset to the RSS before it;
# memory a previous step freed stays in the process and can hide some of a later step's growth)
PEAK: dict[str, tuple[float, float]] = {}


def _status_mib(field: str) -> float:
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def _timed(fn, label: str | None = None):
    if label:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS
        before = _status_mib("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    if label:
        CPU[label] = time.process_time() - c0
        PEAK[label] = (before, _status_mib("VmHWM"))
    return time.perf_counter() - t0, result


def _peaks(*labels: str) -> str:
    return ", ".join(f"{label} {PEAK[label][0]:,.0f} -> {PEAK[label][1]:,.0f}" for label in labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--pools", type=int, default=40)
    parser.add_argument("--gpus", type=int, default=8192)
    parser.add_argument("--month", default="2026-10")
    parser.add_argument("--scale", type=int, default=1, help="N x the tenants (so N x the usage rows), same pools and GPUs")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards (its URL is printed)")
    parser.add_argument("--db", help="rate an already generated database (from --keep) instead of a new one")
    parser.add_argument("--generate-only", action="store_true", help="generate (implies --keep) and stop")
    parser.add_argument("--no-close", action="store_true", help="skip close and issuing (one invoice PDF per tenant)")
    parser.add_argument("--pdf-sample", type=int, default=40, help="tenants whose invoice PDF is timed both ways")
    args = parser.parse_args()
    args.tenants *= args.scale
    if args.db:
        run(args.db, args)
        return

    from app.core.migrate import upgrade

    url = create_database()
    keep = args.keep or args.generate_only
    try:
        upgrade(url)
        t0 = time.perf_counter()
        child = multiprocessing.get_context("spawn").Process(target=generate, args=(url, args))
        child.start()
        child.join()
        if child.exitcode:
            raise SystemExit(f"generation failed (exit {child.exitcode})")
        print(f"generation: {time.perf_counter() - t0:.1f} s", flush=True)
        if keep:
            print(f"database kept: {url}", flush=True)
        if not args.generate_only:
            run(url, args)
    finally:
        if not keep:
            drop_database(url)


def run(url: str, args) -> None:
    from app.billing import hour_rates, periods
    from app.billing.loader import load_hours
    from app.billing.rating import rate_period
    from app.billing.rating_sql import rate_stored
    from app.core.db import make_engine, unit_of_work

    engine = make_engine(url)
    start, end = month_bounds(args.month)
    group_by = text(
        "SELECT pool, tenant, klass, dark, sum(gpu_seconds), sum(activity_sum), sum(activity_samples) "
        "FROM usage_rollup WHERE hour >= :s AND hour < :e GROUP BY pool, tenant, klass, dark"
    )

    def baseline():
        with engine.connect() as conn:
            return len(conn.execute(group_by, {"s": start, "e": end}).all())

    load_before = os.getloadavg()[0]
    baseline()  # warm the buffer cache so neither side pays for disk reads
    t_base, groups = min((_timed(baseline) for _ in range(3)), key=lambda r: r[0])

    def load_only():
        with unit_of_work(engine) as s:
            return sum(len(h.usage) + len(h.micro_usage) for h in load_hours(session=s, start=start, end=end))

    def rate():
        with unit_of_work(engine) as s:
            row = periods.rate(session=s, period=args.month, actor="bench")
            return row.revision

    span = {"period_start": int(start.timestamp()), "period_end": int(end.timestamp())}

    def sql_path():
        with unit_of_work(engine) as s:
            return rate_stored(session=s, start=start, end=end)

    def reference_path():
        with unit_of_work(engine) as s:
            return rate_period(load_hours(session=s, start=start, end=end), **span)

    def store():
        with unit_of_work(engine) as s:
            done = hour_rates.store_missing(session=s, start=start, end=end)
        with engine.connect() as conn:  # as autovacuum would after ingestion: the planner sees the new rows
            conn.execute(text("ANALYZE pool_hour_rate"))
            conn.execute(text("ANALYZE inference_hour_rate"))
            conn.commit()
        return done

    t_store, stored = _timed(store, "store")
    # the SQL path before the reference, which holds a day of rows at a time
    t_rate, _ = _timed(rate, "rate")
    t_sql, by_sql = _timed(sql_path, "sql")
    t_ref, by_reference = _timed(reference_path, "reference")
    equal = (by_sql.lines == by_reference.lines and by_sql.usage == by_reference.usage and by_sql.cost_by_pool == by_reference.cost_by_pool
             and by_sql.unattributed == by_reference.unattributed and by_sql.unpooled == by_reference.unpooled)
    print(f"fleet: {args.tenants} tenants (scale {args.scale}), {args.pools} pools, {args.gpus:,} GPUs, month {args.month}", flush=True)
    print(f"load average before rating: {load_before:.1f} on {os.cpu_count()} CPUs; now {os.getloadavg()[0]:.1f}")
    print(f"baseline GROUP BY      : {t_base:7.2f} s wall   1.0x")
    print(f"store rates (ingestion): {t_store:7.2f} s wall  {t_store / t_base:5.1f}x   python CPU {CPU['store']:6.2f} s   "
          f"({stored.stored:,} pool-hours, {t_store / max(stored.stored, 1) * 1000:.2f} ms each; once, as each hour is ingested)")
    print(f"rate (periods.rate)    : {t_rate:7.2f} s wall  {t_rate / t_base:5.1f}x   python CPU {CPU['rate']:6.2f} s   (goal <= 3x; SQL path + store lines)")
    print(f"  SQL path alone       : {t_sql:7.2f} s wall  {t_sql / t_base:5.1f}x   python CPU {CPU['sql']:6.2f} s")
    print(f"  reference path alone : {t_ref:7.2f} s wall  {t_ref / t_base:5.1f}x   python CPU {CPU['reference']:6.2f} s"
          f"   (rate_period over load_hours)")
    print(f"  reference / SQL path : {t_ref / t_sql:5.1f}x wall; results equal (lines, usage, pool costs, unattributed, unpooled): {equal}", flush=True)
    print(f"RSS at each step's start -> its peak (MiB; {len(by_sql.lines):,} charge lines): "
          + _peaks("store", "rate", "sql", "reference"), flush=True)
    if not equal:
        raise SystemExit("the SQL path and the reference differ")
    if args.no_close:
        engine.dispose()
        return
    t_load, usage_rows = _timed(load_only, "load")
    print(f"load (no rating)       : {t_load:7.2f} s wall  {t_load / t_base:5.1f}x   python CPU {CPU['load']:6.2f} s   ({usage_rows:,} usage rows)", flush=True)

    def close():
        with unit_of_work(engine) as s:
            return periods.close(session=s, period=args.month, actor="bench").status

    t_close, status = _timed(close, "close")

    def pdf_costs():
        """CPU per invoice PDF from the same view, full fonts (each document parses and subsets all of DejaVu, as
        close did before issue 15) against the issuing run's cut-down fonts; checks the bytes are the same."""
        from app.billing import exports, pdf
        from app.billing.invoices import load_view
        from app.billing.period import get_period

        with unit_of_work(engine) as s:
            view = exports._detached_view(load_view(session=s, period=get_period(session=s, month=args.month)))
        sample = view.tenants[: args.pdf_sample]
        c0 = time.process_time()
        full = [pdf.render_invoice_pdf(view, t) for t in sample]
        c1 = time.process_time()
        with pdf.shared_fonts():
            pdf.render_invoice_pdf(view, sample[0])  # the once-per-process cut, counted apart
            c2 = time.process_time()
            shared = [pdf.render_invoice_pdf(view, t) for t in sample]
        c3 = time.process_time()
        assert shared == full, "the cut-down fonts changed an invoice's bytes"
        return (c1 - c0) / len(sample), (c3 - c2) / len(sample), c2 - c1

    per_full, per_shared, cut = pdf_costs()

    def issue():
        from app.billing import issuing

        return issuing.issue_period(engine=engine, month=args.month, actor="bench")

    t_issue, done = _timed(issue, "issue")
    with engine.connect() as conn:
        lines = conn.execute(text("SELECT count(*) FROM charge_line")).scalar()
        docs, size = conn.execute(text("SELECT count(*), coalesce(sum(length(content)), 0) FROM issued_document")).one()
        events = conn.execute(text("SELECT count(*) FROM event WHERE type = 'period.finalized'")).scalar()
    engine.dispose()
    peak_mib = max(peak for _, peak in PEAK.values())  # ru_maxrss is reset with VmHWM
    print(f"GROUP BY -> {groups:,} groups; charge lines stored: {lines:,}; status {status}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times include waiting for a CPU)")
    print(f"close (finalize)  : {t_close:7.2f} s wall  {t_close / t_base:5.1f}x   python CPU {CPU['close']:6.2f} s   "
          f"(re-rate + store lines + status + audit; goal <= 4x)")
    print(f"issue (worker)    : {t_issue:7.2f} s wall  {t_issue / t_base:5.1f}x   python CPU {CPU['issue']:6.2f} s   "
          f"({done.documents:,} documents rendered from the stored lines and stored, {size / 2**20:,.1f} MiB; "
          f"{docs:,} in the table; period.finalized events: {events})")
    print(f"issue per document: {t_issue / done.documents * 1000:7.1f} ms wall, "
          f"{CPU['issue'] / done.documents * 1000:.1f} ms python CPU")
    print(f"invoice PDF CPU, {args.pdf_sample} tenants: full fonts {per_full * 1000:.1f} ms each, cut-down fonts "
          f"{per_shared * 1000:.1f} ms each ({per_full / per_shared:.1f}x less; same bytes); the cut itself {cut:.2f} s once")
    print(f"peak RSS (rate + close + issue process): {peak_mib:,.0f} MiB; at each step's start -> its peak: "
          + _peaks("load", "close", "issue"))


if __name__ == "__main__":
    main()

"""The reconciliation check (issue 24): stored rollups against the source, re-derived by a second, independent path.

source.py reads per-series hourly counts and sums (and raw samples where those cannot tell); derive.py
turns them into each pool-hour's GPUs, occupied GPU-seconds, tenants' GPU-seconds and kWh; compare.py
judges them against the stored rollups within stated tolerances; store.py keeps the verdicts;
service.py runs a range, task.py is the worker's daily check; `chargeback reconcile` is app/billing/reconcile_cli.py.
"""

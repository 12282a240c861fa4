"""FastAPI dependencies the review workflow's JSON and HTML routes share: measured peaks and latency buckets."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from app.core.deps import SessionDep
from app.core.settings import get_settings
from app.policy.service import latest_version, load_document
from app.policy.validation import LatencyBuckets
from app.review import impact


def measured_peaks(session: SessionDep) -> dict[str, float] | None:
    """Peak GPU memory (MiB) per tenant over the last 7 days from Prometheus; None when not measured.

    None when no Prometheus is configured (the simulator) or it does not answer: validation then warns.
    Tests and other sources override this dependency.
    """
    settings = get_settings()
    version = latest_version(session=session)
    if version is None:
        return None
    return impact.measured_peaks_of_clusters(load_document(version), timeout_s=min(settings.prometheus_timeout_s, 10.0))


PeaksDep = Annotated[dict[str, float] | None, Depends(measured_peaks)]
BucketsDep = Annotated[LatencyBuckets | None, Depends(impact.configured_latency_buckets)]

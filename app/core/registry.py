"""Imports every table module so that SQLModel.metadata is complete (Alembic, tests)."""

import app.core.audit  # noqa: F401
import app.metrics.models  # noqa: F401
import app.policy.models  # noqa: F401
import app.billing.models  # noqa: F401
import app.auth.models  # noqa: F401
import app.review.models  # noqa: F401

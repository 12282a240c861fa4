"""Response schemas of the JSON API, one module per area: the bodies `/api/v1/openapi.json` promises.

Each model lists its fields in the order they are served; unknown fields are refused, so a handler
that starts sending a field the document does not describe fails its tests instead of drifting.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, WithJsonSchema


class Out(BaseModel):
    """Base of every response schema: fields in served order, nothing undeclared."""

    model_config = ConfigDict(extra="forbid")


# Money and GPU-hours are exact decimals, served as strings as computed ("1644.24", "74.400000").
DecimalText = Annotated[
    str,
    WithJsonSchema({"type": "string", "format": "decimal", "pattern": r"^-?\d+(\.\d+)?$",
                    "description": "An exact decimal number as a string (money, GPU-hours)"}),
]

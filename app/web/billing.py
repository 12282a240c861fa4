"""Routes (filled in by the domain that owns them)."""

from fastapi import APIRouter

router = APIRouter()

"""``/api/diplomacy``: placeholder router, filled in by the Diplomacy stage."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/diplomacy")

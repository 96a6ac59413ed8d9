"""``/api/runs``: placeholder router, filled in by the run-page stage."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/runs")

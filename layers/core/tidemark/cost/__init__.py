"""The monthly cost model behind ``tidemark cost``: list prices (``prices``), the inputs the
project measured (``measured``) and the arithmetic (``model``), kept apart so each figure has one
place and one source."""

from __future__ import annotations

from tidemark.cost.model import Estimate, LineItem, Workload, estimate

__all__ = ["Estimate", "LineItem", "Workload", "estimate"]

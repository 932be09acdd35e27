"""Declared verdicts of the performance claims (PERF-1, PERF-2, LIN-1, ROPE-12) per built-in encoder.

Merged over each built-in record's declarations; decided by the perf specs
(``pytest specs -m perf``).
"""

from .registry import HOLDS, Declared, not_applicable, refuted  # noqa: F401

PERF_DECLARATIONS: dict[str, dict[str, Declared]] = {
    "learnable": {"PERF-1": HOLDS, "PERF-2": HOLDS},
    "sinusoidal": {"PERF-1": HOLDS, "PERF-2": HOLDS},
    "rope_complex": {"PERF-1": HOLDS, "PERF-2": HOLDS},
}

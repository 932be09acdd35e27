"""Experiments that decide the documents' empirical claims by training small models.

* :mod:`.length_extrapolation` - models trained at length L and scored at L … 8L, with the
  verdicts of ROPE-10b, EXT-1, EXT-2, EXT-3 and parts of HYB-1 (``python -m posenc extrapolation``).
"""

from .length_extrapolation import ExperimentConfig, Verdict, run_experiment, verdicts, write_outputs

__all__ = ["ExperimentConfig", "Verdict", "run_experiment", "verdicts", "write_outputs"]

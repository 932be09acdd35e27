"""Measurements beside the road: timing, memory and traces, TensorBoard summaries, plots, benchmark histories and the perf summary."""

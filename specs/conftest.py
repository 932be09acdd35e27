"""Configuration of the spec suite: registers the performance plug-in's hooks (``specs/perf_plugin.py``)."""

from specs.perf_plugin import (  # noqa: F401  (pytest collects hooks and fixtures by name)
    perf_session,
    pytest_addoption,
    pytest_benchmark_update_machine_info,
    pytest_configure,
    pytest_generate_tests,
    pytest_terminal_summary,
)

"""The harness: what turns claims into verdicts on encoders, one stage per subpackage.

Bottom to top (a stage imports only from its own and the stages below it, and ``posenc.encoders``;
``tests/test_layout.py`` reads the order from :data:`STAGES`):

* :mod:`.catalogue` - the records and what they declare, the registry;
* :mod:`.references`, :mod:`.verdicts` - float64 references and calling protocols; the matrix,
  the journal and the written reports;
* :mod:`.identify`, :mod:`.whole_models`, :mod:`.performance` - identify a RoPE from its outputs;
  whole models in the call convention; measurements, histories and TensorBoard;
* :mod:`.cases` - a spec's cases, each run under its timeout and judged, in one process or many;
* :mod:`.run` - one run: options, selection, session, gates, its end and its printout;
* :mod:`.pytest_plugin` - the hooks, each handing its work to one of the stages above.

Modules that lived directly in ``posenc.harness`` before the stages were split keep their old
import path for one release: ``import posenc.harness.records`` gives the module
``posenc.harness.catalogue.records``, with a :class:`DeprecationWarning` that names the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: The stages, bottom to top: a stage's rank, and the modules it holds.
STAGES: dict[str, tuple[int, tuple[str, ...]]] = {
    "catalogue": (0, ("claims", "states", "records", "record_builders", "declarations", "spec_index",
                      "builtin_records", "multiaxis_records", "producer_records", "published_records", "registry", "perf_rules")),
    "references": (1, ("reference", "protocols", "tensors", "contract", "position_ids")),
    "verdicts": (1, ("matrix", "reports", "html_report", "width", "journal", "primary")),
    "identify": (2, ("identification", "axes_identification")),
    "whole_models": (2, ("models", "model_subject", "model_plan", "torchtune_lm", "vision_models", "attribution")),
    "performance": (2, ("profiling", "kernel_floors", "summaries", "plots", "history", "machine", "perf_report")),
    "cases": (3, ("parametrization", "execution", "isolation", "judge", "running", "process", "parallel",
                  "scheduling", "collector")),
    "run": (4, ("options", "session", "selection", "terminal", "benchmark_gates", "finishing")),
}
#: Old module name -> its stage: ``posenc.harness.<name>`` now lives at ``posenc.harness.<stage>.<name>``.
MOVED: dict[str, str] = {name: stage for stage, (_, names) in STAGES.items() for name in names}


def moved_path(name: str) -> str:
    return f"{__name__}.{MOVED[name]}.{name}"


def _warn(old: str) -> None:
    """The warning, attributed to the first frame outside this module (``warnings`` skips the import
    machinery's own frames)."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{old} moved to {moved_path(old.rpartition('.')[2])}; the old path will be removed in the "
                  "next release", DeprecationWarning, stacklevel=level)


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old path ``posenc.harness.<name>`` to the module at its stage, with a warning."""

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if parent == __name__ and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        _warn(spec.name)
        return importlib.import_module(moved_path(spec.name.rpartition(".")[2]))

    def exec_module(self, module):  # the module at its stage is already executed
        pass


def __getattr__(name: str):
    """``posenc.harness.<old name>`` as an attribute: the module at its stage, with a warning."""
    if name in MOVED:
        _warn(f"{__name__}.{name}")
        module = globals()[name] = importlib.import_module(moved_path(name))  # warned once
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())

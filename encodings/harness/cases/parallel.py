"""Specs spread over processes and hosts with pytest-xdist, giving the serial run's matrix.

* Workers run specs and attach each outcome to its report; only the controller aggregates them
  and writes reports (:mod:`.pytest_plugin`). Each worker also sends the test ids it collected
  per cell, so partial cells are found as in a serial run.
* ``-n N`` distributes with ``--dist loadgroup`` (a plain ``--dist load`` is upgraded): each
  encoder's specs form one group and stay in one worker, with its compiled kernels, caches and
  timeout bookkeeping. Other ``--dist`` modes are respected.
* Each worker uses ``cpu_count / workers`` torch threads (at least 1) unless ``--perf-threads``
  says otherwise, so workers do not oversubscribe the cores.
* Each worker keeps its own Hypothesis example database (``.hypothesis/examples-<worker>``) and,
  unless ``TORCHINDUCTOR_CACHE_DIR`` is set, its own Inductor cache directory.
* With ``--device cuda`` worker ``gw<i>`` uses GPU ``i mod device_count``.
* Benchmarks are refused under ``-n``: timings taken by parallel workers on shared cores are not
  comparable.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import pytest
import torch

_EXPECTED = "posenc_expected"
_LOADGROUP = "posenc_loadgroup"


def worker_id(config) -> str | None:
    """``gw0``, ``gw1``, … in a pytest-xdist worker; None in the controller or a serial run."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def distributing(config) -> bool:
    """True in the controller of a pytest-xdist run."""
    return worker_id(config) is None and bool(getattr(config.option, "tx", None)) and \
        getattr(config.option, "dist", "no") != "no"


def worker_gpu(worker: str, device_count: int) -> int:
    """The GPU index for worker ``gw<i>``: ``i mod device_count``."""
    if device_count < 1:
        raise ValueError("no CUDA device to assign")
    digits = "".join(ch for ch in worker if ch.isdigit())
    return int(digits or 0) % device_count


def assign_gpu(worker: str) -> int:
    """Make worker ``gw<i>``'s current CUDA device GPU ``i mod device_count``; return it."""
    index = worker_gpu(worker, torch.cuda.device_count())
    torch.cuda.set_device(index)
    return index


def _selects_benchmarks(config) -> bool:
    from _pytest.mark.expression import Expression  # pytest's own -m evaluator

    expression = config.option.markexpr
    if not expression:
        return True
    return Expression.compile(expression).evaluate(lambda name, **kwargs: name == "perf")


def configure_controller(config) -> None:
    if not distributing(config):
        return
    if _selects_benchmarks(config):
        raise pytest.UsageError("-m perf with -n: timings taken by parallel workers on shared cores are not "
                                "comparable; run the benchmarks without -n (or with -n 0)")
    if config.option.dist == "load":
        config.option.dist = "loadgroup"


def configure_worker(config, device: str, threads: int = 0) -> None:
    worker = worker_id(config)
    if worker is None:
        return
    workers = int(config.workerinput.get("workercount", 1))
    torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // workers))
    if config.workerinput.get(_LOADGROUP):
        config.option.loadgroup = True  # name the group in node ids, as --dist loadgroup would
        config.pluginmanager.register(GroupingCheck(), "posenc-grouping-check")
    if device == "cuda":
        assign_gpu(worker)
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        root = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / f"posenc-{worker}")


class GroupingCheck:
    """In a worker under ``--dist loadgroup``: warns where pytest-xdist named no group in the node ids
    (with pytest 9.2 it cannot: pytest-xdist#1386), so each encoder's specs are spread over the workers."""

    @pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook has named the groups
    def pytest_collection_modifyitems(self, config, items) -> None:
        grouped = [item for item in items if item.get_closest_marker("xdist_group")]
        if grouped and not any("@" in item.nodeid for item in grouped):
            import warnings

            warnings.warn(f"pytest-xdist's --dist loadgroup named no group under pytest {pytest.__version__} "
                          "(pytest-xdist#1386): each encoder's specs are spread over the workers, with caches and "
                          "compiled kernels built in each; the verdicts are the same. pytest below 9.2 groups them",
                          UserWarning, stacklevel=1)


def own_hypothesis_database(config) -> None:
    """In a worker, after every plug-in (Hypothesis's own included) has loaded its profile."""
    worker = worker_id(config)
    if worker is not None:
        _own_hypothesis_database(worker)


def _own_hypothesis_database(worker: str) -> None:
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    current = settings.default
    if current.database is None:
        return
    name = f"posenc-{worker}"
    settings.register_profile(name, parent=current,
                              database=DirectoryBasedExampleDatabase(f".hypothesis/examples-{worker}"))
    settings.load_profile(name)


# ---------------------------------------------------------------- controller <-> workers

def expected_to_workeroutput(config, expected: dict[tuple[str, str], set[str]] | None) -> None:
    if worker_id(config) is not None and expected is not None:
        config.workeroutput[_EXPECTED] = [[claim, encoder, sorted(ids)] for (claim, encoder), ids in expected.items()]


def expected_from_node(node, expected: dict[tuple[str, str], set[str]] | None) -> dict | None:
    """Merge a finished worker's collected ids into ``expected``."""
    sent = getattr(node, "workeroutput", {}).get(_EXPECTED)
    if sent is None:
        return expected
    merged = dict(expected or {})
    for claim, encoder, ids in sent:
        merged.setdefault((claim, encoder), set()).update(ids)
    return merged


def mark_node(node) -> None:
    if node.config.option.dist == "loadgroup":
        node.workerinput[_LOADGROUP] = True

"""Repository-wide pytest configuration.

Enables the harness plug-in (encoder selection, verdict matrix) and registers
the Hypothesis profiles:

* ``dev``      - the default: 10 draws per case (half as many in a half-precision repeat of a
  float32 case, besides the pinned examples: ``posenc.harness.cases.execution.sized_draws``),
  derandomized, so two runs of the same code give the same cells;
* ``ci``       - ``dev`` under its own name, chosen automatically when ``CI`` is set;
* ``explore``  - ``dev`` with random draws and the example database: new inputs every run;
* ``thorough`` - 1000 examples per spec;
* ``triage``   - ``ci`` without shrinking, for runs that expect many failures (the project's
  own tests of plug-ins and mutants): first counterexample, not the minimal one;
* ``explicit`` - only the pinned ``@example`` cases: proves every refutation is deterministic.

Choose with ``--hypothesis-profile NAME`` or ``POSENC_HYPOTHESIS_PROFILE=NAME``.
"""

import torch
from hypothesis import HealthCheck, Phase, register_random, settings

pytest_plugins = ["posenc.harness.pytest_plugin"]

_COMMON = dict(deadline=None, print_blob=True, report_multiple_bugs=False,
               suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=10, derandomize=True, **_COMMON)
settings.register_profile("ci", parent=settings.get_profile("dev"))
settings.register_profile("explore", max_examples=10, derandomize=False, **_COMMON)
settings.register_profile("thorough", max_examples=1000, derandomize=False, **_COMMON)
settings.register_profile("triage", parent=settings.get_profile("ci"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.register_profile("explicit", parent=settings.get_profile("ci"), phases=[Phase.explicit])


class _TorchRandom:
    """torch's global RNG, seeded and restored by Hypothesis like ``random``."""

    def seed(self, seed):
        # Not torch.manual_seed: on a machine without CUDA it queues a lazy CUDA, MTIA and XPU seed
        # per call, each capturing a formatted stack, a fifth of a spec run's time.
        torch.default_generator.manual_seed(seed)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.manual_seed_all(seed)

    def getstate(self):
        return torch.random.get_rng_state()

    def setstate(self, state):
        torch.random.set_rng_state(state)


TORCH_RANDOM = _TorchRandom()
register_random(TORCH_RANDOM)

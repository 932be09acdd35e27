"""Helpers shared by every spec: inputs, calling conventions, float64 references, verdicts.

Specs import this module as ``s``. The verdict helpers (:func:`violated`, :func:`require_within`)
take the claim, the encoder and the spec's name from the running spec, so a spec names its
claim once, in its ``claim`` marker, and every failure carries a command that reruns it.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import pytest
import torch

from posenc import BuildConfig, ClaimViolation, EncoderRecord
from posenc.harness.references import protocols, tensors
from posenc.harness.catalogue import records
from posenc.harness.catalogue.claims import GeometryContradiction, NoClearError, NotPositional
from posenc.harness.references.contract import Excluded, Undecided, error_text
from posenc.harness.references.reference import (  # noqa: F401  (specs use them as s.<name>)
    DELTAS,
    call_length,
    FAR_POSITIONS,
    input_pair_order,
    output_pair_order,
    reference_attention,
    reference_frequencies,
    reference_rotation,
    roformer_bound,
)
from posenc.harness.cases.running import (  # noqa: F401
    RunningSpec, current, drawn_values, first_line, reproducer, running, shorten)
from posenc.harness.references.tensors import from_heads, max_error, randn  # noqa: F401  (specs use them as s.<name>)

#: The configuration every spec builds encoders with unless it says otherwise.
SPEC_CONFIG = records.SPEC_CONFIG


# ---------------------------------------------------------------- inputs and calls

def config(**overrides) -> BuildConfig:
    """:data:`SPEC_CONFIG` with ``overrides``."""
    return BuildConfig(**{**SPEC_CONFIG.__dict__, **overrides})


def build(record: EncoderRecord, dtype=torch.float32, device="cpu", **overrides) -> torch.nn.Module:
    """The encoder as specs call it, ``f(x, positions=None, offset=0)``, whatever its protocol; a
    head size the record does not compute is excluded (``n/a``), never a crash."""
    cfg = config(**overrides)
    if record.kind in ("rotary", "attention"):
        require_head_dim(record, cfg.head_dim)
    return protocols.build_subject(record, **{**cfg.__dict__, "dtype": dtype, "device": device})


def input_shape(record: EncoderRecord, batch: int, seq: int, cfg: BuildConfig = SPEC_CONFIG) -> tuple:
    return record.input_shape(batch, seq, cfg)


def as_heads(t: torch.Tensor, cfg: BuildConfig = SPEC_CONFIG) -> torch.Tensor:
    """View ``(batch, seq, d_model)`` as ``(batch, seq, heads, head_dim)``; rank-4 input is returned as is."""
    return tensors.as_heads(t, cfg)


#: The farthest position a spec reaches on an encoder without positions (``positions="none"``): the
#: harness gets there through a zero prefix as long as the position, so 10^6 costs too much there.
PREFIX_FARTHEST = 10**5


def reachable(record: EncoderRecord, position: int) -> int:
    """``position``, or :data:`PREFIX_FARTHEST` where a prefix of that length would be needed beyond it."""
    return min(position, PREFIX_FARTHEST) if record.calling.positions == "none" else position


def position_cap(record: EncoderRecord, wanted: int, cfg: BuildConfig = SPEC_CONFIG) -> int:
    """The largest position a spec may use: a learned table stops at ``max_len - 1``, a fixed cache
    (``record.limits.max_position``) at its last row."""
    if record.limits.max_position is not None:
        wanted = min(wanted, record.limits.max_position - 1)
    return min(wanted, cfg.max_len - 1) if record.limits.table_limited else wanted


def answered(what: str, call):
    """``call()``, where the claim says the encoder answers: an error is a violation of the claim."""
    try:
        return call()
    except (ClaimViolation, GeometryContradiction):
        raise
    except Exception as error:  # noqa: BLE001 - the claim says it answers; any error refutes it
        violated(f"{what}: raised {type(error).__name__}: {first_line(error_text(error), 80)}",
                 message=shorten(error_text(error)))



def heads_config(head_dim: int, n_heads: int = 2, **overrides) -> dict:
    """Build overrides giving ``head_dim`` per head."""
    return dict(d_model=head_dim * n_heads, n_heads=n_heads, **overrides)


def max_angle(positions, geometry=None) -> float:
    """The largest angle p·θ_0 / s formed for ``positions`` (θ_0 = 1)."""
    p = float(torch.as_tensor(positions).max()) if torch.as_tensor(positions).numel() else 0.0
    return p / (geometry.scaling_factor if geometry else 1.0)


def needs_float64(record: EncoderRecord) -> None:
    """Skip a spec whose arithmetic (finite differences, least squares, matrix algebra) needs float64
    when the encoder does not declare float64 support."""
    if torch.float64 not in record.limits.dtypes:
        pytest.skip(f"{record.name} does not declare float64 (dtypes {[str(d) for d in record.limits.dtypes]}); "
                    "this spec needs float64 precision")


# ---------------------------------------------------------------- verdicts

def _judged(kind: type[AssertionError], summary: str, details: dict) -> AssertionError:
    """A ``kind`` of the running spec's claim, with ``details``, a reproducer and the drawn values."""
    spec = current()
    drawn = drawn_values(spec)
    error = kind(spec.record.name, spec.claim, summary, **details, reproducer=reproducer(spec, drawn))
    error.drawn = drawn
    return error


def violated(summary: str, **details):
    """Raise :class:`ClaimViolation` of the running spec's claim, with ``details`` and a reproducer."""
    __tracebackhide__ = True
    raise _judged(ClaimViolation, summary, details)


def contradicts_geometry(summary: str, **details):
    """Raise :class:`GeometryContradiction`: the encoder contradicts its record's declared geometry,
    which no declared refutation of the running claim excuses."""
    __tracebackhide__ = True
    raise _judged(GeometryContradiction, summary, details)


def not_positional(summary: str, blame: str, **details):
    """Raise :class:`NotPositional`: a violation of the running claim that the positions do not
    cause, blamed on ``blame``, with the evidence in ``details``."""
    __tracebackhide__ = True
    raise _judged(lambda *a, **k: NotPositional(*a, blame=blame, **k), summary, details)


def no_clear_error(summary: str, **details):
    """Raise :class:`NoClearError`: bad input met with no error or an unclear one, but no garbage."""
    __tracebackhide__ = True
    raise _judged(NoClearError, summary, details)


#: A clear error past a table names the limit ("index 4096 is out of bounds … size 4096" does not).
LIMIT_WORDS = ("max_len", "max_seq_len", "max_position", "maximum", "limit", "table", "exceed")


def undecided(summary: str, **details):
    """End a measured spec without a verdict: its confidence interval contains the bar."""
    __tracebackhide__ = True
    spec = current()
    shown = "; ".join(f"{k}={v}" for k, v in details.items())
    raise Undecided(f"undecided: [{spec.claim}] {spec.record.name}: {summary}" + (f" ({shown})" if shown else ""))


def require_within(*, error: float, bound: float, what: str, **details):
    """Raise :class:`ClaimViolation` unless ``error <= bound`` (NaN fails)."""
    __tracebackhide__ = True
    if not error <= bound:
        if math.isnan(bound):  # the bound scales with an output that is not finite
            violated(f"{what}: error {error:.3e}, and the tolerance is NaN: the output it scales with is not finite",
                     **details)
        violated(f"{what}: error {error:.3e} exceeds tolerance {bound:.3e}", **details)


@contextmanager
def judging(record: EncoderRecord, claim: str):
    """Apply the verdict helpers of ``claim`` to ``record`` inside a demonstration (a test of the
    harness that takes no ``record`` argument, outside the matrix)."""
    with running(RunningSpec(claim, "demonstration", "(demonstration)", "", record)):
        yield


def encode_pair(module, q, k, q_positions=None, k_positions=None, **offsets):
    """``(f_q(q, m), f_k(k, n))`` through the encoder's richest protocol (``q_offset=``/``k_offset=``)."""
    return protocols.encode_pair(module, q, k, q_positions, k_positions, **offsets)


def logits(module, q, k, q_positions=None, k_positions=None, **offsets) -> tuple[torch.Tensor, float]:
    """Per-token, per-head ``⟨f_q(q_j, m_j), f_k(k_j, n_j)⟩`` in float64 (q and k of equal length), and
    the scale rounding errors are measured against: the largest ``Σ_i |f_q(q)_i|·|f_k(k)_i|``."""
    found, scale, _ = logits_and_queries(module, q, k, q_positions, k_positions, **offsets)
    return found, scale


def logits_and_queries(module, q, k, q_positions=None, k_positions=None, **offsets):
    """:func:`logits`, and ``f_q(q)`` itself per head in float64 (its norm, without another call)."""
    with torch.no_grad():
        fq, fk = encode_pair(module, q, k, q_positions, k_positions, **offsets)
    fq, fk = as_heads(fq).to(torch.float64), as_heads(fk).to(torch.float64)
    return (fq * fk).sum(-1), dot_scale(fq, fk), fq


def dot_scale(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max Σ_i |a_i|·|b_i|`` over the last dim: the magnitude a dot product's rounding errors scale with
    (``|q|·|k|`` for a rotation; smaller than that where a scale such as xPos's differs by pair)."""
    return float((a.abs() * b.abs()).sum(-1).max())


def disagreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a − b|`` for two outputs of one encoder that must agree (call paths, fresh and used
    modules): where both are the same non-finite value they agree (the garbage is another claim's
    to report); where only one is, they disagree (∞)."""
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    finite_a, finite_b = torch.isfinite(a), torch.isfinite(b)
    same_garbage = ~finite_a & ~finite_b & ((a == b) | (torch.isnan(a) & torch.isnan(b)))
    if bool(((~finite_a | ~finite_b) & ~same_garbage).any()):
        return float("inf")
    both = finite_a & finite_b
    return float((a[both] - b[both]).abs().max()) if bool(both.any()) else 0.0


def require_head_dim(record: EncoderRecord, head_dim: int) -> None:
    """Skip, with the reason, a configuration the record says the encoder does not support."""
    if not record.supports_head_dim(head_dim):
        most = f" up to {record.limits.max_head_dim}" if record.limits.max_head_dim is not None else ""
        raise Excluded(f"{record.name} supports head_dim ≥ {record.limits.min_head_dim}{most} in multiples of "
                       f"{record.limits.head_dim_multiple}; this check needs head_dim={head_dim}")


def supported_head_dim(record: EncoderRecord, drawn: int) -> int:
    """The smallest head_dim ≥ ``drawn`` the record supports: how drawn sizes respect the record."""
    multiple = record.limits.head_dim_multiple
    wanted = max(record.limits.min_head_dim + (-record.limits.min_head_dim) % multiple, drawn + (-drawn) % multiple)
    return wanted if record.limits.max_head_dim is None else min(wanted, record.limits.max_head_dim)

"""ALiBi (Press, Smith and Lewis 2022, §3), the length experiment's baseline: the literature's claims.

ALiBi adds ``b_h(m, n) = −m_h · (m − n)`` to head ``h``'s logit of query ``m`` and key ``n ≤ m``.

* ALIBI-1: for keys at or before the query the bias depends only on the offset ``m − n``:
  ``b(m + t, n + t) = b(m, n)`` for any shift ``t``, and it is linear in it, ``−m_h · (m − n)`` with
  the encoder's own slopes ``m_h``;
* ALIBI-2: causal: keys after the query get ``−∞`` (softmax weight 0), keys at or before it a
  finite bias;
* ALIBI-3: the slopes follow the paper: for ``n`` heads a power of two, ``m_h = 2^(−8h/n)``,
  ``h = 1 … n``; otherwise the slopes of ``2^⌊log2 n⌋`` heads, then every other slope of twice
  that many (the authors' ``get_slopes``), read off the bias as ``b_h(1, 1) − b_h(1, 0)``.

The ``contract`` row of a bias: positions of the wrong rank, fractional or negative positions
are clear errors.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from posenc.harness.catalogue.claims import CONTRACT
from specs import strategies as draws
from specs import support as s

BIAS = ("bias",)


def paper_slopes(n_heads: int) -> torch.Tensor:
    """The paper's slopes, written from §3 and its footnote (independently of the encoder)."""
    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra, dtype=torch.float64)


def bias_of(module, q_positions, k_positions):
    with torch.no_grad():
        return module(q_positions, k_positions).to(torch.float64)


def measured_slopes(module, position: int = 1) -> torch.Tensor:
    """``m_h = b_h(p, p) − b_h(p, p − 1)``: one step of offset, so a term in ``p`` alone cancels."""
    q = torch.tensor([position])
    return bias_of(module, q, q)[:, 0, 0] - bias_of(module, q, q - 1)[:, 0, 0]


@pytest.mark.claim("ALIBI-1", kinds=BIAS)
@given(seed=draws.seeds, shift=draws.shifts)
@example(seed=0, shift=1001)  # no power of two
@example(seed=1, shift=4096)
def test_bias_depends_only_on_the_offset(record, seed, shift):
    module = s.build(record)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 500, (6,), generator=generator)
    k = torch.randint(0, 500, (9,), generator=generator)
    before, after = bias_of(module, q, k), bias_of(module, q + shift, k + shift)
    offsets = (q[:, None] - k[None, :]).to(torch.float64)
    finite = (offsets >= 0).expand_as(before)  # keys at or before the query; masking is ALIBI-2's
    slopes = measured_slopes(module)  # its own slopes (ALIBI-3 judges them)
    expected = -slopes[:, None, None] * offsets
    tol = record.tolerance(torch.float32)
    bound = tol.bound(float(expected[finite].abs().max()) if bool(finite.any()) else 1.0)
    s.require_within(error=s.max_error(after[finite], before[finite]), bound=bound,
                     what=f"b(m + {shift}, n + {shift}) ≠ b(m, n): the bias is not a function of m − n")
    s.require_within(error=s.max_error(before[finite], expected[finite]), bound=bound,
                     what="the bias is not −m_h·(m − n)")


@pytest.mark.claim("ALIBI-2", kinds=BIAS)
@given(start=st.integers(0, 5000), seq=st.integers(2, 12))
@example(start=37, seq=7)
def test_bias_is_causal(record, start, seq):
    module = s.build(record)
    p = torch.arange(start, start + seq)
    bias = bias_of(module, p, p)
    later = torch.ones(seq, seq, dtype=torch.bool).triu(1).expand_as(bias)
    if not bool(torch.isneginf(bias[later]).all()):
        s.violated("a key after its query has a finite bias: the bias is not causal", positions=p.tolist())
    if not bool(torch.isfinite(bias[~later]).all()):
        s.violated("a key at or before its query is masked", positions=p.tolist())
    weights = (torch.randn(bias.shape, dtype=torch.float64) + bias).softmax(dim=-1)
    if float(weights[later].abs().max()) != 0.0:
        s.violated("softmax gives weight to a later key")


@pytest.mark.claim("ALIBI-3", kinds=BIAS)
@pytest.mark.parametrize("n_heads", [1, 2, 4, 6, 8, 12, 16])
def test_slopes_follow_the_paper(record, n_heads):
    module = s.build(record, n_heads=n_heads, d_model=16 * n_heads)
    measured = measured_slopes(module)
    expected = paper_slopes(n_heads)
    s.require_within(error=s.max_error(measured, expected), bound=record.tolerance(torch.float32).bound(1.0),
                     what=f"slopes for {n_heads} heads differ from the paper's", observed=measured.tolist(),
                     expected=expected.tolist())


@pytest.mark.claim(CONTRACT, kinds=BIAS)
def test_bad_positions_are_clear_errors(record):
    module = s.build(record)
    for what, positions, words in (
        ("positions of rank 3", torch.zeros(1, 2, 3, dtype=torch.long), ("rank",)),
        ("fractional positions", torch.tensor([0.0, 1.5]), ("integer",)),
        ("a negative position", torch.tensor([0, -2]), ("non-negative", "negative")),
    ):
        try:
            module(positions)
        except Exception as error:  # noqa: BLE001 - the message is judged, not the type
            if not any(w in str(error).lower() for w in words):
                s.no_clear_error(f"{what}: the {type(error).__name__} does not name the limit",
                                 message=s.shorten(str(error)), expected_words=words)
            continue
        s.violated(f"{what}: accepted silently")

"""The rotation itself.

* ROPE-1 (000 §3.1, 004 §3.2, §6.1): pair ``i`` at position ``m`` is multiplied by
  ``[[cos mθ_i, −sin mθ_i], [sin mθ_i, cos mθ_i]]``; with ``R_0 = I`` and the group law
  ``R_m R_n = R_{m+n}`` (gradients are the contract row's, checked by gradcheck).
* ROPE-3 in matrix form: ``R_mᵀ R_m = I``.
* ROPE-2 (000 §3.2, 004 §3.1): ``θ_i = base^(−2i/d)`` for any base and even ``d``, observed as the
  angle by which one step of position turns the encoder's own pair ``i`` (its ``i``-th pair by
  first coordinate), in magnitude: which coordinates pair up and which way they turn are ROPE-1's. With it, RoFormer §3.4.3's long-term decay: the bound
  ``B(r) = (1/(d/2))·Σ_j |S_j|``, ``S_j = Σ_{k<j} e^{i r θ_k}``, decays in trend but not monotonically.
* ROPE-8 (000 §3.2): the encoder equals complex multiplication ``(x_2i + i·x_2i+1)·e^{imθ_i}`` in float64,
  at the θ the encoder itself turns by (read off a fresh module): the form, not the schedule.
"""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from specs import strategies as draws
from specs import support as s

ROTARY = ("rotary",)


def rotation_matrix(record, module, position: int, head_dim: int, dtype=torch.float64) -> torch.Tensor:
    """The encoder's linear map at ``position`` on one head, read column by column from basis vectors."""
    basis = torch.eye(head_dim, dtype=dtype)[None, :, None, :]  # (1, d, 1, d): token j carries e_j
    n_heads = 1
    if record.calling.input_layout == "bsd":
        n_heads = module.n_heads if hasattr(module, "n_heads") else s.SPEC_CONFIG.n_heads
    basis = basis.expand(1, head_dim, n_heads, head_dim)
    with torch.no_grad():
        out = module(s.from_heads(basis, record), torch.full((head_dim,), position))
    return s.as_heads(out.reshape(1, head_dim, -1), _cfg(head_dim, n_heads))[0, :, 0, :].T.to(torch.float64)


def _cfg(head_dim, n_heads):
    from posenc import BuildConfig

    return BuildConfig(d_model=head_dim * n_heads, n_heads=n_heads)


@pytest.mark.claim("ROPE-1", kinds=ROTARY)
@given(seed=draws.seeds, position=st.integers(0, 5000))
@example(seed=0, position=3)
def test_two_dimensional_rotation_is_the_explicit_matrix(record, dtype, seed, position):
    """d = 2: one pair, rotated by ``m·θ_0 / s`` (θ_0 = 1 for the formula) and scaled as the geometry declares."""
    s.require_head_dim(record, 2)
    position = s.position_cap(record, position)
    module = s.build(record, dtype, **s.heads_config(2, n_heads=1))
    x = s.randn(s.input_shape(record, 1, 1, _cfg(2, 1)), seed, dtype)
    with torch.no_grad():
        y = module(x, torch.tensor([position])).reshape(2).to(torch.float64)
    geometry = record.geometry
    a = position * float(geometry.inverse_frequencies(2, length=position + 1)[0]) / geometry.scaling_factor
    scale = float(geometry.scale(torch.tensor([position]), 2)[0, 0])
    matrix = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
    expected = scale * matrix @ x.reshape(2).to(torch.float64)
    s.require_within(error=s.max_error(y, expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()), a),
                     what=f"d=2 output differs from [[cos, −sin], [sin, cos]] at m={position}")


@pytest.mark.claim("ROPE-1", kinds=ROTARY)
@given(seed=draws.seeds, positions=draws.position_lists(3000, 10))
@example(seed=0, positions=[0, 1, 2, 3, 4, 100, 101, 1000, 2999, 7])
def test_rotation_matches_the_formula_with_per_batch_positions(record, dtype, device, seed, positions):
    module = s.build(record, dtype, device)
    p = torch.tensor(positions, device=device).reshape(2, 5).clamp(max=s.position_cap(record, 10**7))
    x = s.randn(s.input_shape(record, 2, 5), seed, dtype, device)
    with torch.no_grad():
        outputs = s.encode_pair(module, x, x, p, p)  # as q and as k: a pair encoder may treat them apart
    for side, y in zip("qk", outputs):
        expected = s.reference_rotation(s.as_heads(x), p, record.geometry, s.SPEC_CONFIG.head_dim, side=side)
        s.require_within(error=s.max_error(s.as_heads(y), expected),
                         bound=record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(p, record.geometry)),
                         what=f"{side}'s output differs from the float64 rotation at per-batch positions")


@pytest.mark.claim("ROPE-1", kinds=ROTARY)
def test_position_zero_is_the_identity(record, dtype):
    module = s.build(record, dtype)
    x = s.randn(s.input_shape(record, 2, 3), seed=11, dtype=dtype)
    with torch.no_grad():
        y = module(x, torch.zeros(3, dtype=torch.long))
    expected = s.reference_rotation(s.as_heads(x), torch.zeros(1, 3, dtype=torch.long), record.geometry,
                                    s.SPEC_CONFIG.head_dim)  # x itself, in the layout's output order, times the declared scale
    s.require_within(error=s.max_error(s.as_heads(y), expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max())),
                     what="R_0 is not the identity (up to the layout's output order and the declared scale)")


@pytest.mark.far_positions
@pytest.mark.claim("ROPE-1", kinds=ROTARY)
@given(m=st.integers(0, 4000), n=st.integers(0, 4000))
@example(m=3, n=61)
@example(m=64, n=64)
def test_rotations_compose(record, m, n):
    """``R_m R_n = R_{m+n}``, read off as matrices (float64), back in the formula's order, each divided by
    the scale the geometry declares at its position (YaRN's factor, xPos's ζ^p), so only the rotations compose."""
    s.needs_float64(record)
    m, n = (min(v, s.position_cap(record, 10**7) // 2) for v in (m, n))
    head_dim = s.SPEC_CONFIG.head_dim
    layout = record.geometry.layout
    to_formula = torch.argsort(s.output_pair_order(record.geometry, head_dim))
    pin = s.input_pair_order(record.geometry, head_dim)

    def formula_order(position):  # each read off a fresh module: state a reading leaves is ROPE-9's
        module = s.build(record, torch.float64, **s.heads_config(head_dim, n_heads=1))
        matrix = rotation_matrix(record, module, position, head_dim)
        matrix = matrix[to_formula][:, pin] if layout != "half_split" else matrix[pin][:, pin]
        scale = record.geometry.scale(torch.tensor(position), record.geometry.rotary_dim(head_dim))
        per_feature = torch.ones(head_dim, dtype=torch.float64)
        per_feature[: 2 * len(scale)] = scale.repeat_interleave(2)
        return matrix / per_feature[:, None]

    composed, direct = formula_order(m) @ formula_order(n), formula_order(m + n)
    s.require_within(error=s.max_error(composed, direct),
                     bound=record.tolerance(torch.float64).bound(1.0, s.max_angle(m + n, record.geometry)),
                     what=f"R_{m} R_{n} ≠ R_{m + n}")


@pytest.mark.claim("ROPE-3", kinds=ROTARY)
@given(m=st.integers(0, 10**4))  # far positions are ROPE-10a's, as for ROPE-8
@example(m=5)
@example(m=10**4)
def test_rotation_matrix_is_orthogonal(record, m):
    s.needs_float64(record)
    head_dim = s.SPEC_CONFIG.head_dim
    m = s.reachable(record, min(m, s.position_cap(record, m)))
    module = s.build(record, torch.float64, **s.heads_config(head_dim, n_heads=1))
    r = rotation_matrix(record, module, m, head_dim)
    s.require_within(error=s.max_error(r.T @ r, torch.eye(head_dim, dtype=torch.float64)),
                     bound=record.tolerance(torch.float64).bound(1.0),
                     what=f"R_mᵀ R_m ≠ I at m={m}")


def measured_frequencies(record, make, head_dim: int) -> torch.Tensor:
    """How fast each of the encoder's own pairs turns, ``|θ|`` read off the rate ``M_2 M_1ᵀ``, pairs
    in the order of their first coordinate. A rate, so an origin shift does not bias it; the
    encoder's own pairs (the coordinates the rate mixes), so a wrong pairing is ROPE-1's and
    ROPE-13's to blame; a magnitude, so turning backwards is too. Each matrix is read off a fresh
    module from ``make()``, so state one reading leaves is ROPE-9's to blame. Raises a violation
    where the map is no rotation of pairs at all."""
    rate = rotation_matrix(record, make(), 2, head_dim) @ rotation_matrix(record, make(), 1, head_dim).T
    tol = 1e-9 * float(rate.abs().max())
    entries = rate.tolist()  # Python floats: the loops below read each entry once
    partners = {}
    for j in range(head_dim):
        mixed = [i for i in range(head_dim) if i != j and abs(entries[i][j]) > tol]
        if len(mixed) > 1:
            s.violated(f"coordinate {j} is mixed with {len(mixed)} others in one step of position: the map is no "
                       "rotation of pairs, so its pairs have no frequencies", coordinate=j, mixed_with=mixed[:6])
        if mixed:
            partners[j] = mixed[0]
    pairs = sorted((a, b) for a, b in partners.items() if a < b and partners.get(b) == a)
    return torch.tensor([abs(math.atan2(entries[b][a], entries[a][a])) for a, b in pairs],
                        dtype=torch.float64)


@pytest.mark.claim("ROPE-2", kinds=ROTARY)
@given(base=draws.bases, dim=draws.even_dims)
@example(base=10000.0, dim=16)
@example(base=500.0, dim=64)
def test_frequencies_follow_the_formula(record, base, dim):
    if record.limits.fixed_base:
        base = 10000.0  # the published code hard-codes it
    s.needs_float64(record)
    dim = s.supported_head_dim(record, dim)
    geometry = record.geometry
    rotary_dim = geometry.rotary_dim(dim)
    theta = measured_frequencies(record, lambda: s.build(record, torch.float64, **s.heads_config(dim, base=base)), dim)
    expected = s.reference_frequencies(rotary_dim, base) / geometry.scaling_factor  # the formula the claim states
    if len(theta) != len(expected):
        s.contradicts_geometry(f"the map turns {len(theta)} pairs of head_dim {dim}; the geometry rotates "
                               f"{len(expected)}", observed=theta[:4].tolist(), expected=expected[:4].tolist())
    s.require_within(error=s.max_error(theta, expected),
                     bound=record.tolerance(torch.float64).bound(1.0, 1.0),
                     what=f"θ_i ≠ base^(−2i/d) for base={base}, d={dim}",
                     observed=theta[:4].tolist(), expected=expected[:4].tolist())


@pytest.mark.claim("ROPE-2", kinds=ROTARY)
def test_long_term_decay_of_the_roformer_bound(record):
    """RoFormer §3.4.3: window means of B(r) fall from r ≈ 1 to r ≈ 4096, yet B is not monotone."""
    s.needs_float64(record)
    dim = 128
    s.require_head_dim(record, dim)
    theta = measured_frequencies(record, lambda: s.build(record, torch.float64, **s.heads_config(dim)), dim)
    distances = torch.arange(0, 4096)
    bound = s.roformer_bound(theta, distances)
    windows = [(1, 8), (8, 64), (64, 512), (512, 4096)]
    means = [float(bound[a:b].mean()) for a, b in windows]
    if not all(earlier > later for earlier, later in zip(means, means[1:])):
        s.violated("the RoFormer bound does not decay in trend", window_means=means)
    rises = int((bound[1:] > bound[:-1]).sum())
    if rises == 0:
        s.violated("the RoFormer bound decays monotonically, unlike the frequencies of the formula")


def own_frequencies(record, head_dim: int) -> torch.Tensor | None:
    """``|θ_i|`` by which one step of position turns the formula's pair ``i`` on a fresh float64
    module: the angles the encoder itself uses, so that ROPE-8 judges the complex form (the sign of
    the turn, the pairing) and a wrong θ stays ROPE-1's and ROPE-2's. None where the schedule follows
    the call's length or the record has no float64."""
    geometry = record.geometry
    if geometry.length_dependent or torch.float64 not in record.limits.dtypes:
        return None
    module = s.build(record, torch.float64, **s.heads_config(head_dim, n_heads=1))
    matrix = rotation_matrix(record, module, 1, head_dim)
    to_formula = torch.argsort(s.output_pair_order(geometry, head_dim))
    pin = s.input_pair_order(geometry, head_dim)
    matrix = matrix[to_formula][:, pin] if geometry.layout != "half_split" else matrix[pin][:, pin]
    pairs = geometry.rotary_dim(head_dim) // 2
    return torch.tensor([abs(math.atan2(float(matrix[2 * i + 1, 2 * i]), float(matrix[2 * i, 2 * i])))
                         for i in range(pairs)], dtype=torch.float64)


@pytest.mark.far_positions
@pytest.mark.claim("ROPE-8", kinds=ROTARY)
@given(seed=draws.seeds, positions=draws.position_lists(10**4, 4))  # far positions are ROPE-10a's
@example(seed=0, positions=[0, 1, 512, 9_999])
def test_equals_complex_multiplication(record, dtype, device, seed, positions):
    module = s.build(record, dtype, device)
    p = torch.tensor(positions, device=device).clamp(max=s.position_cap(record, 10**7))
    x = s.randn(s.input_shape(record, 1, 4), seed, dtype, device)
    with torch.no_grad():
        y = s.as_heads(module(x, p)).to(torch.float64)
    head_dim = s.SPEC_CONFIG.head_dim
    layout = record.geometry.layout
    r = record.geometry.rotary_dim(head_dim)
    x64 = s.as_heads(x).to(torch.float64)[..., s.input_pair_order(record.geometry, head_dim)]
    theta = own_frequencies(record, head_dim)
    if theta is None:  # a schedule that follows the call's length: the record's, at this call's length
        theta = record.geometry.inverse_frequencies(r, length=s.call_length(p)) / record.geometry.scaling_factor
    magnitude = record.geometry.scale(p.cpu(), r)
    phasor = torch.polar(magnitude, p[:, None].double().cpu() * theta)
    pairs = torch.view_as_complex(x64[..., :r].reshape(*x64.shape[:-1], r // 2, 2).contiguous().cpu())
    rotated = torch.view_as_real(pairs * phasor[None, :, None, :]).flatten(-2)
    expected = torch.cat((rotated, x64[..., r:].cpu()), dim=-1)
    if layout != "interleaved":
        expected = expected[..., s.output_pair_order(record.geometry, head_dim)]
    s.require_within(error=s.max_error(y.cpu(), expected),
                     bound=record.tolerance(dtype).bound(float(expected.abs().max()), s.max_angle(p, record.geometry)),
                     what="output differs from complex multiplication (x_2i + i x_2i+1)·e^{imθ_i}")

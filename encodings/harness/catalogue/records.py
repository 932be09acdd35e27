"""Encoder records: one typed record per encoder drives every spec.

A record says how to build the encoder, how to call it, what it is (kind,
source), the float64 geometry its rotation must reproduce, its tolerances per
dtype, and, for **every** claim in :data:`posenc.claims.CLAIMS`, a declared
verdict: it holds, it is refuted (a strict expected failure, optionally aimed
at named specs), or it does not apply. Leaving a claim undeclared is an error.

The records themselves are data (:mod:`.builtin_records`, users' plug-in files); the
registry that holds them is :mod:`.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Literal, Mapping

import torch
from torch import nn

from .claims import CLAIMS, CONTRACT, DESIGNS, is_subject
from .states import DECLARABLE, State

Kind = Literal["additive", "rotary", "attention", "bias", "model", "producer"]
Layout = Literal["bsd", "bshd"]
#: How a rotary encoder is called (see :class:`EncoderRecord`).
Protocol = Literal["single", "pair", "cos_sin"]
PROTOCOLS = ("single", "pair", "cos_sin")

#: Contract specs that judge the *error* bad input raises. A library that validates no input may
#: declare the contract refuted: these become expected failures. The specs that find silent
#: garbage (a negative position wrapping to the table's end, positions silently sliced) are not
#: among them and stay reported.
CLEAR_ERROR_SPECS = ("test_rejects_non_float_input", "test_rejects_wrong_rank",
                     "test_rejects_positions_of_wrong_shape", "test_rejects_negative_positions")


@dataclass(frozen=True)
class Declared:
    """A declared verdict. ``specs`` narrows a refutation to the named spec functions."""

    status: State  # holds, refuted or n/a (states.DECLARABLE)
    reason: str = ""  # why: printed in the reports
    specs: tuple[str, ...] = ()  # a refutation aimed at these spec functions only
    dtypes: tuple[torch.dtype, ...] = ()  # a refutation only in these input dtypes
    garbage: bool = False  # a contract refutation that also covers silent garbage (published code as it is)

    def __post_init__(self):
        if self.status not in DECLARABLE:
            raise ValueError(f"status must be one of {', '.join(DECLARABLE)}, got {self.status!r}")
        object.__setattr__(self, "status", State(self.status))
        if self.status != State.HOLDS and not self.reason:
            raise ValueError(f"a {self.status} declaration needs a reason")
        if (self.specs or self.dtypes) and self.status != State.REFUTED:
            raise ValueError("only a refutation can be aimed at named specs or dtypes")
        for dtype in self.dtypes:
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise ValueError(f"a refutation's dtypes must be floating torch dtypes, got {dtype!r}")

    def expects_failure(self, spec_name: str, dtype: torch.dtype | None = None) -> bool:
        """Whether ``spec_name`` (run in ``dtype``, if it takes one) must fail as declared."""
        if self.status != State.REFUTED or (self.specs and spec_name not in self.specs):
            return False
        return not self.dtypes or dtype in self.dtypes


HOLDS = Declared(State.HOLDS)


def refuted(reason: str, *, specs: tuple[str, ...] | list[str] = (), dtypes=(), garbage: bool = False) -> Declared:
    """A strict expected failure; ``specs`` and ``dtypes`` narrow it (for example bf16 and fp16 only).
    ``garbage``: a contract refutation that also expects silent garbage, for the documents' code as
    published (a library's contract refutation excuses only a missing or unclear error)."""
    return Declared(State.REFUTED, reason, tuple(specs), tuple(dtypes), garbage)


def holds_only(reason: str) -> Declared:
    """Holds, with what the verdict rests on (a fix, a window, the machine), printed beside it."""
    return Declared(State.HOLDS, reason)


def not_applicable(reason: str) -> Declared:
    return Declared(State.NA, reason)


@dataclass(frozen=True)
class Tolerance:
    """Error bound ``atol + magnitude · (rtol + angle_rtol · max_angle)``.

    ``angle_rtol`` is the relative error of an angle ``p·θ`` as formed, so the
    bound grows with the largest angle, as it must for a correct implementation.
    """

    rtol: float  # relative to the output's magnitude
    atol: float  # absolute
    angle_rtol: float = 0.0  # relative error of an angle as formed, times the largest angle

    def bound(self, magnitude: float = 1.0, max_angle: float = 0.0) -> float:
        return self.atol + magnitude * (self.rtol + self.angle_rtol * max_angle)


_FP32_ANGLE = 2.0**-21  # θ from an fp32 pow (a few ulp) and the rounding of p·θ, with margin

# rtol: twice the worst case of rounding each output to the dtype (2 · 2u for a normalised dot product).
DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(rtol=1e-10, atol=1e-12, angle_rtol=2.0**-50),
    torch.float32: Tolerance(rtol=2e-5, atol=1e-6, angle_rtol=_FP32_ANGLE),
    torch.float16: Tolerance(rtol=2.0**-9, atol=1e-4, angle_rtol=_FP32_ANGLE),
    torch.bfloat16: Tolerance(rtol=2.0**-6, atol=1e-3, angle_rtol=_FP32_ANGLE),
}
#: float64 input through fp32 angles: cos and sin carry fp32 rounding (2^-24 each, with margin).
FLOAT64_THROUGH_FP32_ANGLES = Tolerance(rtol=2.0**-20, atol=1e-7, angle_rtol=_FP32_ANGLE)


def tolerances_for_angles(angle_dtype: torch.dtype | None) -> dict[torch.dtype, Tolerance]:
    """Tolerances per input dtype, derived from the dtype angles are formed in.

    ``None``: angles in float64 for float64 input and in fp32 otherwise (this project's encoders).
    ``torch.float32``: every input's angles in fp32, as production RoPEs form them, so float64
    input is held to fp32-angle accuracy.
    """
    if angle_dtype is None or angle_dtype == torch.float64:
        return dict(DEFAULT_TOLERANCES)
    if angle_dtype == torch.float32:
        return {**DEFAULT_TOLERANCES, torch.float64: FLOAT64_THROUGH_FP32_ANGLES}
    raise ValueError(f"angle_dtype must be None, torch.float32 or torch.float64, got {angle_dtype}; angles in "
                     "a narrower dtype are a defect the specs find (ROPE-11), not a precision to declare")


@dataclass(frozen=True)
class FiniteDifference:
    """Central finite differences in float64: step, and the agreement expected with autograd."""

    step: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7


FINITE_DIFFERENCE = FiniteDifference()


Side = Literal["q", "k"]


@dataclass(frozen=True)
class RotaryGeometry:
    """What a float64 reference needs to reproduce an encoder's rotation exactly.

    Pair ``i`` of the rotated width ``r`` at position ``p`` turns by ``(p / scaling_factor)·θ_i``
    and is scaled by ``magnitude · position_scale(p, r, side)_i``, where

    * ``θ = frequencies(r, base)`` (default ``base^(−2i/r)``): linear interpolation, NTK-aware,
      YaRN, Llama 3 and LongRoPE are schedules (:mod:`posenc.encoders.scaling.frequencies`);
      with ``length_dependent`` it is ``frequencies(r, base, length=L)`` with ``L`` the call's
      largest position + 1 (dynamic NTK: no hidden state, a function of the call alone);
    * ``position_scale(p, r, side)`` is a per-pair factor by position, differing for q and k
      (xPos); ``None`` is 1; with ``scale_length_dependent`` it also takes ``length=``, the call's
      largest position + 1 (an xPos scale centred on the call);
    * ``angle_dtype``: the dtype angles are formed in (``None``: float64 for float64 input,
      fp32 otherwise; ``torch.float32``: always fp32, as production code does). The record's
      tolerances for every input dtype derive from it.
    """

    base: float = 10000.0  # θ_i = base^(-2i/r) before any scaling
    layout: str = "interleaved"  # interleaved | half_split | concatenated
    rotary_fraction: float = 1.0  # partial rotary: the first fraction of each head is rotated
    scaling_factor: float = 1.0  # linear position interpolation: angles at p / s
    frequencies: Callable[..., torch.Tensor] | None = None  # θ(rotary_dim, base[, length=]); None: base^(-2i/d)
    magnitude: float = 1.0  # factor on the rotated features (YaRN's attention factor)
    position_scale: Callable[..., torch.Tensor] | None = None  # xPos: (p, r, side[, length=]) -> factors
    scale_length_dependent: bool = False  # position_scale takes the call's length (xPos centred on the call)
    length_dependent: bool = False  # frequencies take the call's length (dynamic NTK)
    angle_dtype: torch.dtype | None = None  # the dtype angles are formed in; None: the input's, float64 at most
    # Multi-axis RoPE (M-RoPE, 2D): positions (axes, batch, seq) reach every protocol's calls.
    axis_sections: tuple[int, ...] = ()  # each axis's share of the pairs: Qwen2-VL's 16:24:24 is (2, 3, 3); (): 1D
    axis_order: str = "contiguous"  # contiguous (Qwen2-VL) | interleaved (Qwen3-VL): which pairs an axis owns
    # | spatial_interleaved (Ernie 4.5 VL): axes 1…A−1 alternate over the first pairs (H W H W …), then axis 0's
    axis_schedule: str = "shared"  # shared: θ over the head (M-RoPE) | per_axis: each axis its own (axial 2D)
    mixed_frequencies: Callable[..., torch.Tensor] | None = None  # RoPE-Mixed: (axes, pairs) θ_{a,i} at init

    @property
    def axes(self) -> int:
        """Position axes: 1 for 1D RoPE."""
        return len(self.axis_sections) or 1

    def sections(self, rotary_dim: int) -> tuple[int, ...]:
        """Pairs per axis at a rotated width: the parts scaled to ``rotary_dim / 2`` pairs."""
        pairs, parts = rotary_dim // 2, sum(self.axis_sections)
        if pairs % parts:
            raise ValueError(f"{pairs} pairs cannot be shared {':'.join(map(str, self.axis_sections))} between "
                             f"the axes: rotary_dim must be a multiple of {2 * parts}")
        return tuple(n * pairs // parts for n in self.axis_sections)

    def pair_axes(self, rotary_dim: int) -> torch.Tensor:
        """The axis that owns each pair (zeros for 1D RoPE)."""
        if not self.axis_sections:
            return torch.zeros(rotary_dim // 2, dtype=torch.long)
        sections, axes = self.sections(rotary_dim), len(self.axis_sections)
        if self.axis_order == "contiguous":  # Qwen2-VL: axis 0's pairs, then axis 1's, …
            owner = [axis for axis, n in enumerate(sections) for _ in range(n)]
        elif self.axis_order == "interleaved":  # Qwen3-VL: pair i is axis (i mod A)'s while i < A·sections[i mod A]
            owner = [i % axes if i % axes and i < axes * sections[i % axes] else 0 for i in range(sum(sections))]
        else:  # Ernie 4.5 VL: pair i < Σ_{a≥1} sections[a] is axis 1 + i mod (A − 1)'s, the rest axis 0's
            spatial = sum(sections[1:])
            owner = [1 + i % (axes - 1) if i < spatial else 0 for i in range(sum(sections))]
        counts = [owner.count(axis) for axis in range(axes)]
        if counts != list(sections):  # an interleaving that the declared shares do not fit
            raise ValueError(f"{self.axis_order} sections {sections} do not fit {sum(sections)} pairs: the axes "
                             f"would own {counts}")
        return torch.tensor(owner, dtype=torch.long)

    def __post_init__(self):
        if self.layout not in ("interleaved", "half_split", "concatenated"):
            raise ValueError(f"layout must be interleaved, half_split or concatenated, got {self.layout!r}")
        if self.axis_order not in ("contiguous", "interleaved", "spatial_interleaved") or \
                self.axis_schedule not in ("shared", "per_axis"):
            raise ValueError(f"axis_order must be contiguous, interleaved or spatial_interleaved and axis_schedule "
                             f"shared or per_axis, got {self.axis_order!r} and {self.axis_schedule!r}")
        if self.axis_order == "spatial_interleaved" and (len(self.axis_sections) < 2
                                                         or len(set(self.axis_sections[1:])) != 1):
            raise ValueError(f"spatial_interleaved alternates axes 1… over the pairs: they need equal sections, and "
                             f"there must be at least 2 axes, got axis_sections={self.axis_sections}")
        if not 0 < self.rotary_fraction <= 1:
            raise ValueError(f"rotary_fraction must be in (0, 1], got {self.rotary_fraction}")
        if self.length_dependent and self.frequencies is None:
            raise ValueError("length_dependent needs a frequencies schedule that takes length=")
        tolerances_for_angles(self.angle_dtype)  # validates angle_dtype

    def inverse_frequencies(self, rotary_dim: int, base: float | None = None, length: int | None = None) -> torch.Tensor:
        """θ_i of the rotated pairs in float64: the geometry's schedule, or ``base^(-2i/d)``."""
        base = self.base if base is None else base
        if self.mixed_frequencies is not None:  # with equal ids on every axis, pair i turns by Σ_a θ_{a,i}
            return torch.as_tensor(self.mixed_frequencies(rotary_dim), dtype=torch.float64).sum(0)
        if self.axis_sections and self.axis_schedule == "per_axis":  # axial 2D: each axis's own base^(−2j/(2n))
            owner, theta, sections = self.pair_axes(rotary_dim).tolist(), [], self.sections(rotary_dim)
            seen = dict.fromkeys(range(self.axes), 0)
            for axis in owner:
                theta.append(base ** (-2.0 * seen[axis] / (2 * sections[axis])))
                seen[axis] += 1
            return torch.tensor(theta, dtype=torch.float64)
        if self.frequencies is None:
            return base ** -(torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        if self.length_dependent:
            return torch.as_tensor(self.frequencies(rotary_dim, base, length=length), dtype=torch.float64)
        return torch.as_tensor(self.frequencies(rotary_dim, base), dtype=torch.float64)

    def scale(self, positions: torch.Tensor, rotary_dim: int, side: Side = "q", length: int | None = None) -> torch.Tensor:
        """Per-pair factor on the rotated features at ``positions`` (float64), shape ``positions.shape + (r/2,)``;
        ``length`` is the call's (largest position + 1) for a scale centred on the call."""
        p = positions.to(torch.float64)
        factor = torch.full((*p.shape, rotary_dim // 2), self.magnitude, dtype=torch.float64, device=p.device)
        if self.position_scale is not None:
            extra = {"length": int(p.max()) + 1 if length is None else length} if self.scale_length_dependent else {}
            factor = factor * torch.as_tensor(self.position_scale(p, rotary_dim, side, **extra), dtype=torch.float64)
        return factor

    def rotary_dim(self, head_dim: int) -> int:
        """Rotated features of a head: ``rotary_fraction · head_dim``, rounded down to even, at least 2."""
        return max(2, int(head_dim * self.rotary_fraction) // 2 * 2)


@dataclass(frozen=True)
class BuildConfig:
    """What ``build`` receives: the sizes a spec draws, and where and in what dtype to build."""

    d_model: int = 64  # model width; head_dim = d_model // n_heads
    n_heads: int = 4  # heads
    max_len: int = 128  # a learned table's rows (table_limited records keep positions below it)
    base: float = 10000.0  # the frequency base
    device: str = "cpu"  # cpu or cuda
    dtype: torch.dtype = torch.float32  # the module's dtype

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


#: The configuration every spec builds encoders with unless it says otherwise.
SPEC_CONFIG = BuildConfig(d_model=64, n_heads=4, max_len=128)


@dataclass(frozen=True)
class Calling:
    """How the harness calls an encoder (see :class:`EncoderRecord` for each convention)."""

    protocol: Protocol = "single"  # single, pair or cos_sin (EncoderRecord)
    apply: Callable | None = None  # cos_sin protocol: apply(q, k, cos, sin) -> (q', k')
    positions: Literal["any", "offset", "none"] = "any"  # "offset": a start offset only; "none": x alone
    input_layout: Layout = "bshd"  # bshd: (batch, seq, heads, head_dim); bsd: (batch, seq, d_model)


@dataclass(frozen=True)
class Limits:
    """The configurations an encoder supports: a spec that needs another reads ``n/a`` (excluded)."""

    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64, torch.bfloat16, torch.float16)  # input dtypes
    min_head_dim: int = 2  # the smallest head size it computes
    head_dim_multiple: int = 2  # head sizes it computes are multiples of this
    max_head_dim: int | None = None  # a module of one fixed size
    max_position: int | None = None  # a fixed table (a published cache) covers positions below this
    table_limited: bool = False  # positions must stay below config.max_len (a learned table)
    fixed_base: bool = False  # built with base 10000 whatever the config says (published code)


@dataclass(frozen=True)
class ModelTraits:
    """What a whole model (``kind="model"``) is, as the model relations need it (specs/test_models.py).

    ``build(config)`` returns a :class:`posenc.harness.whole_models.models.ModelSubject` (an adapter over the
    model's own call convention)."""

    positions: Literal["relative", "absolute", "alibi"] = "relative"  # RoPE: relative; a table: absolute
    max_position: int | None = None  # the configured maximum (max_position_embeddings); None: none
    extrapolates: bool = True  # relative positions run past max_position (False: a fixed table, GPT-J)
    table_grows: bool = False  # absolute sinusoids computed for any position (XGLM, TrOCR): no table limit
    original_max_position: int | None = None  # a scaled model's original (pre-training) length
    vocab_size: int = 128
    #: The logits' width where the output layer answers over more than the ``vocab_size`` the ids
    #: are drawn from (Inkling 2's ``unpadded_vocab_size``); None: ``vocab_size``.
    logits_width: int | None = None
    takes_position_ids: bool = True  # False: positions come from the mask alone (Bloom, MPT)
    takes_attention_mask: bool = True  # False: no padding (a model with its own cache and no mask)
    library: str = ""  # the class it builds, with its library and version, for the reports
    #: Past this position a call's largest position rescales the frequencies (dynamic NTK: the
    #: maximum; longrope: the original length): there a full pass and its prefixes differ by design.
    rescales_at: int | None = None
    #: The attention forms each call's full score matrix (transformers' eager attention): a long
    #: prefill costs its square, so decoding crosses thresholds through one only up to
    #: ``model_plan.DECODE_NEAR_QUADRATIC``.
    quadratic_attention: bool = False
    #: How a model takes documents packed in one row (MODEL-8): ``positions`` (position ids that
    #: restart tell them, transformers' packed format), ``document_ids`` (a ``document_ids=``
    #: keyword of shape (batch, seq)), or ``none``.
    packing: Literal["none", "positions", "document_ids"] = "none"
    #: False: the model needs positions given (its own regime of the relations is n/a).
    own_positions: bool = True
    #: A vision-language model with M-RoPE ids ``(3, batch, seq)``: its build returns a
    #: :class:`posenc.harness.whole_models.vision_models.HFVisionLanguageLM` (the VLM relations apply).
    vision: bool = False
    #: How its video time ids run (``frames``: by frame index; ``seconds``: by absolute time,
    #: Qwen2.5-VL); None: no video is judged.
    video_time: Literal["frames", "seconds"] | None = None

    @property
    def table_limited(self) -> bool:
        """Positions must stay below ``max_position`` (an absolute table, or a fixed cos/sin table)."""
        return self.max_position is not None and not self.table_grows and \
            (self.positions == "absolute" or not self.extrapolates)


#: How the harness calls a position producer (``kind="producer"``), by its protocol.
PRODUCER_PROTOCOLS = {
    "mrope_ids": "producer(input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None, "
                 "attention_mask=None, second_per_grid_ts=None) -> (position_ids (3, batch, seq), deltas (batch, 1))",
    "vision_grid": "producer(grid_thw (n, 3)) -> (patches, 2) ids (row, col), in the order the tower lists patches",
    "packing": "producer([{'input_ids': [...], 'position_ids': (3, len) where axes=3}, ...]) -> {'input_ids': (1, n), "
               "'position_ids': (1, n) or (3, 1, n), and the boundaries it declares: 'cu_seq_lens', 'seq_idx'}",
    "cp_shard": "producer({'input_ids': (1, n), 'position_ids': (1, n) or (3, 1, n)}, rank, world) -> that rank's "
                "{'input_ids', 'position_ids'}; producer.restore(shards) -> the sequence in order, where declared",
}


@dataclass(frozen=True)
class ProducerTraits:
    """What a position producer (``kind="producer"``) is, as the position-id specs need it
    (``specs/test_id_builders.py``, ``test_packing.py``, ``test_sharding.py``). ``build(config)``
    returns the producer, called as :data:`PRODUCER_PROTOCOLS` says for its ``protocol``."""

    protocol: Literal["mrope_ids", "vision_grid", "packing", "cp_shard"]
    merge: int = 2  # mrope_ids, vision_grid: the spatial merge size (2 × 2 patches a token)
    #: mrope_ids: how a video's time ids run: ``frames`` (frame index), ``seconds`` (seconds per
    #: grid × tokens per second, Qwen2.5-VL), ``split`` (each frame its own block, framed by text:
    #: Qwen3-VL, GLM-4.1V); None: the builder takes no video.
    time: Literal["frames", "seconds", "split"] | None = "frames"
    tokens_per_second: float = 2.0
    image_token_id: int = 151655  # mrope_ids: for builders that read the token ids (Qwen's)
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    axes: Literal[1, 3] = 1  # packing, cp_shard: 1D ids (1, n) or M-RoPE ids (3, 1, n)
    boundaries: tuple[str, ...] = ()  # packing: what it declares besides positions: cu_seq_lens, seq_idx
    restores: bool = False  # cp_shard: it has ``restore(shards)``
    library: str = ""  # the function it wraps, with its library and version, for the reports

    def __post_init__(self):
        if self.protocol not in PRODUCER_PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PRODUCER_PROTOCOLS)}, got {self.protocol!r}")
        unknown = set(self.boundaries) - {"cu_seq_lens", "seq_idx"}
        if unknown:
            raise ValueError(f"boundaries must be among cu_seq_lens, seq_idx, got {sorted(unknown)}")
        if self.axes not in (1, 3) or self.merge < 1:
            raise ValueError(f"axes must be 1 or 3 and merge at least 1, got {self.axes} and {self.merge}")


_GROUPED = {**{name: "calling" for name in Calling.__dataclass_fields__},
            **{name: "limits" for name in Limits.__dataclass_fields__}}


@dataclass(frozen=True, repr=False, init=False)
class EncoderRecord:
    """One encoder under test, its fields in four groups.

    **What to build and how to call it.** ``build(config)`` returns a module on ``config.device``
    in ``config.dtype``; ``kind``, ``source``, ``description``; ``calling`` (:class:`Calling`).
    By ``kind``:

    * ``additive``: ``module(x, positions=None, offset=0)`` on ``(batch, seq, d_model)``;
    * ``rotary``: on ``(batch, seq, heads, head_dim)`` (``input_layout="bshd"``) or
      ``(batch, seq, d_model)`` (``"bsd"``), applied to q and k, by ``protocol``:

      - ``single``: ``module(x, positions=None, offset=0)``;
      - ``pair``: ``module(q, k, q_positions, k_positions) -> (q', k')``; q and k may differ in
        length and positions (decoding) and be treated differently (xPos);
      - ``cos_sin``: ``cos, sin = module(x, position_ids)``, then ``apply(q, k, cos, sin) -> (q', k')``
        (transformers, vLLM);

      positions given to ``pair`` and ``cos_sin`` are int64 of shape ``(batch, seq)``;
    * ``attention``: also ``module.attend(q, k, v, positions=None, offset=0)`` on per-head tensors;
    * ``bias``: ``module(q_positions, k_positions=None) -> (heads, q_len, k_len)``, a bias added to the
      attention logits (ALiBi).

    ``positions="offset"``: the encoder takes ``module(x, offset=0)`` (``module(q, k, offset=0)`` for
    the pair protocol) only, no explicit positions; the harness reaches explicit positions through
    that offset path, row by row or token by token.
    ``positions="none"``: the encoder takes ``module(x)`` alone (positions ``0 … seq − 1``, as the
    documents' snippets); the harness reaches position ``p`` through a zero prefix of ``p`` tokens.

    **Geometry.** ``geometry`` (:class:`RotaryGeometry`), the float64 rotation it must reproduce;
    ``tolerances`` default to those derived from ``geometry.angle_dtype``.

    **Declarations.** ``claims``: a :class:`Declared` verdict for every claim (the ``contract`` row
    may be declared too: a library that validates no input); ``designs`` names the documents'
    designs the encoder implements (default: ``rope`` for rotary, ``rope_attention`` for attention,
    none for additive). A claim's cell is a verdict on the documents only where the claim is made
    about one of them (:data:`posenc.harness.catalogue.claims.SUBJECTS`); elsewhere it is a cross-check.
    ``corrects`` names the published encoder this one corrects.

    **Limits** (:class:`Limits`). Supported dtypes and head sizes; ``max_position``: positions past
    a fixed table (000 §3.2's 2048-row cache) are used only by the specs of claims about going past
    it (ROPE-9, ROPE-10a), where an error is a violation.

    The fields of ``calling`` and ``limits`` may also be given, and read, by their own names
    (``protocol="pair"``, ``record.max_position``), as plug-in files written before the groups do.
    """

    name: str  # the encoder's name in the matrix and in --encoders
    build: Callable[[BuildConfig], nn.Module]  # a module on config.device in config.dtype
    kind: Kind  # additive, rotary, attention or bias: how it is called (above)
    source: str  # where the code comes from (a file, a library and version, a section)
    claims: Mapping[str, Declared]  # a verdict for every claim (rotary_claims() fills a standard RoPE)
    description: str = ""  # one line for the reports
    origin: str = "built-in"  # built-in, published, plug-in or ecosystem
    calling: Calling = Calling()  # how the harness calls it (Calling)
    geometry: RotaryGeometry | None = None  # the float64 rotation it must reproduce (rotary kinds)
    tolerances: Mapping[torch.dtype, Tolerance] | None = None  # per input dtype; None: derived from the geometry
    limits: Limits = Limits()  # the configurations it supports (Limits)
    designs: tuple[str, ...] | None = None  # the documents' designs it implements (claims.DESIGNS)
    corrects: str = ""  # the published encoder this one corrects
    model: ModelTraits | None = None  # a whole model's traits (kind "model" only)
    producer: ProducerTraits | None = None  # a position producer's traits (kind "producer" only)

    def __init__(self, name, build, kind, source, claims, description="", origin="built-in", calling=None,
                 geometry=None, tolerances=None, limits=None, designs=None, corrects="", model=None, producer=None,
                 **grouped):
        unknown = sorted(set(grouped) - set(_GROUPED))
        if unknown:
            raise TypeError(f"EncoderRecord got unexpected fields {unknown}")
        calling = replace(calling or Calling(), **{k: v for k, v in grouped.items() if _GROUPED[k] == "calling"})
        limits = replace(limits or Limits(), **{k: v for k, v in grouped.items() if _GROUPED[k] == "limits"})
        for field_name, value in (("name", name), ("build", build), ("kind", kind), ("source", source),
                                  ("claims", claims), ("description", description), ("origin", origin),
                                  ("calling", calling), ("geometry", geometry), ("tolerances", tolerances),
                                  ("limits", limits), ("designs", designs), ("corrects", corrects),
                                  ("model", model), ("producer", producer)):
            object.__setattr__(self, field_name, value)
        self.__post_init__()

    def __getattr__(self, name: str):
        group = _GROUPED.get(name)
        if group is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(object.__getattribute__(self, group), name)

    def __post_init__(self):
        calling, limits = self.calling, self.limits
        if self.kind not in ("additive", "rotary", "attention", "bias", "model", "producer"):
            raise ValueError(f"{self.name}: kind must be additive, rotary, attention, bias, model or producer, "
                             f"got {self.kind!r}")
        if (self.kind == "producer") != (self.producer is not None):
            raise ValueError(f"{self.name}: a producer record gives producer=ProducerTraits(...), and only it takes one")
        if (self.kind == "model") != (self.model is not None):
            raise ValueError(f"{self.name}: a model record gives model=ModelTraits(...), and only it takes one")
        if calling.input_layout not in ("bsd", "bshd"):
            raise ValueError(f"{self.name}: input_layout must be bsd or bshd, got {calling.input_layout!r}")
        if calling.protocol not in PROTOCOLS:
            raise ValueError(f"{self.name}: protocol must be one of {PROTOCOLS}, got {calling.protocol!r}")
        if calling.protocol != "single" and (self.kind != "rotary" or calling.input_layout != "bshd"):
            raise ValueError(f"{self.name}: the {calling.protocol} protocol is for rotary encoders on "
                             "(batch, seq, heads, head_dim)")
        if calling.positions not in ("any", "offset", "none") or (calling.positions, calling.protocol) in (
                ("none", "pair"), ("none", "cos_sin"), ("offset", "cos_sin")):
            raise ValueError(f"{self.name}: positions must be 'any', 'offset' (single or pair protocol) or 'none' "
                             f"(single protocol), got {calling.positions!r} for the {calling.protocol} protocol")
        if calling.positions == "none" and self.kind == "attention":
            raise ValueError(f"{self.name}: positions='none' is reached by a zero prefix, exact only for per-token "
                             "encoders; an attention module gives attend(..., offset=) instead")
        if (calling.protocol == "cos_sin") != (calling.apply is not None):
            raise ValueError(f"{self.name}: the cos_sin protocol needs apply(q, k, cos, sin), and only it takes one")
        if limits.min_head_dim < 2 or limits.head_dim_multiple < 2 or limits.head_dim_multiple % 2:
            raise ValueError(f"{self.name}: min_head_dim must be at least 2 and head_dim_multiple even, "
                             f"got {limits.min_head_dim} and {limits.head_dim_multiple}")
        if self.designs is None:
            default = {"rotary": ("rope",), "attention": ("rope_attention",), "additive": (), "bias": (),
                       "model": ("model",), "producer": (self.producer.protocol,) if self.producer else ()}[self.kind]
            object.__setattr__(self, "designs", default)
        unknown_designs = set(self.designs) - set(DESIGNS)
        if unknown_designs:
            raise ValueError(f"{self.name}: unknown designs {sorted(unknown_designs)}; known: {', '.join(DESIGNS)}")
        missing = sorted(set(CLAIMS) - set(self.claims), key=list(CLAIMS).index)
        if missing:
            raise ValueError(f"encoder {self.name!r} leaves claims undeclared: {', '.join(missing)}")
        unknown = sorted(set(self.claims) - set(CLAIMS) - {CONTRACT})
        if unknown:
            raise ValueError(f"encoder {self.name!r} declares unknown claims: {', '.join(unknown)}")
        contract = self.claims.get(CONTRACT)
        if contract is not None:
            if contract.status == State.NA:
                raise ValueError(f"encoder {self.name!r}: the contract always applies; declare it refuted with a reason")
            if contract.status == State.REFUTED:
                aimed = set(contract.specs) or set(CLEAR_ERROR_SPECS)
                if aimed - set(CLEAR_ERROR_SPECS):
                    raise ValueError(f"encoder {self.name!r}: a contract refutation covers only the clear-error "
                                     f"specs {CLEAR_ERROR_SPECS}; silent garbage stays reported")
                if not contract.specs:
                    object.__setattr__(self, "claims", {**self.claims, CONTRACT: Declared(
                        State.REFUTED, contract.reason, CLEAR_ERROR_SPECS, contract.dtypes, contract.garbage)})
        if self.tolerances is None:
            angle = self.geometry.angle_dtype if self.geometry is not None else None
            object.__setattr__(self, "tolerances", tolerances_for_angles(angle))
        for dtype in limits.dtypes:
            if dtype not in self.tolerances:
                raise ValueError(f"encoder {self.name!r} has no tolerance declared for {dtype}")

    def __repr__(self) -> str:
        return f"EncoderRecord({self.name!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        """Hypothesis and IPython print the name alone, not every declaration."""
        printer.text(repr(self))

    def declared(self, claim: str) -> Declared:
        return self.claims.get(CONTRACT, HOLDS) if claim == CONTRACT else self.claims[claim]

    def role(self, claim: str) -> str:
        """``verdict`` (a claim the documents make about this design), ``cross-check``, or ``n/a``."""
        if not self.applies(claim):
            return State.NA
        return "verdict" if is_subject(claim, self.designs) else "cross-check"

    def supports_head_dim(self, head_dim: int) -> bool:
        return (head_dim >= self.limits.min_head_dim and head_dim % self.limits.head_dim_multiple == 0
                and (self.limits.max_head_dim is None or head_dim <= self.limits.max_head_dim))

    @property
    def group(self) -> str:
        """The group the reports show it in: its kind, or ``multiaxis`` for a RoPE with a position per axis."""
        multiaxis = self.kind == "rotary" and self.geometry is not None and self.geometry.axes > 1
        return "multiaxis" if multiaxis else self.kind

    def applies(self, claim: str) -> bool:
        return self.declared(claim).status != State.NA

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return self.tolerances[dtype]

    def input_shape(self, batch: int, seq: int, config: BuildConfig) -> tuple[int, ...]:
        """The shape this encoder takes: ``(batch, seq, d_model)`` or ``(batch, seq, heads, head_dim)``."""
        if self.kind == "attention" or self.calling.input_layout == "bsd":
            return (batch, seq, config.d_model)
        return (batch, seq, config.n_heads, config.head_dim)

    def make(self, dtype: torch.dtype = torch.float32, device: str = "cpu", **config) -> nn.Module:
        return self.build(BuildConfig(dtype=dtype, device=device, **config))


def with_defaults(defaults: Mapping[str, Declared], overrides: Mapping[str, Declared] | None = None):
    """A complete declaration: ``defaults`` for every claim, with ``overrides`` on top."""
    unknown = set(overrides or {}) - set(CLAIMS) - {CONTRACT}
    if unknown:
        raise ValueError(f"unknown claims: {', '.join(sorted(unknown))}")
    return {**defaults, **(overrides or {})}

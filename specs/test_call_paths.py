"""Equivalent call paths give the same result: the harness's own claims (``specs/claims.md``, PATH).

Production RoPEs reach the same rotation along several paths, and their defects hide on the
paths a unit test does not take. Each spec compares the encoder with itself, so it blames the
path, not the formula (ROPE-1, ROPE-2 and ROPE-11 judge that):

* PATH-1: the offset path equals explicit positions, ``f(x, offset=o) = f(x, arange(o, o + n))``,
  at offsets where bf16 (past 256) and fp16 (past 2048) cannot represent the integer positions.
* PATH-2: decoding equals the full sequence. The last query's logits against keys cached one
  step at a time (a prefill of 4, then one token per call: through the offset path for the single
  protocol, one ``(q_j, k_j)`` call of one token for the pair and cos/sin protocols; and for the
  pair protocol also the library's call of one query against all keys) equal row ``T − 1`` of the
  full ``⟨f(q, m), f(k, n)⟩``, at ``T = 300``, past ``max_len`` (128) and past 256: the decode's
  one-token calls cross every length below ``T`` (a cache's growth, a schedule that switches at
  its original length), so a shorter decode would add only calls this one makes. The full
  sequence and the decode each on a fresh module.
* PATH-3: casting the module keeps its frequencies: ``module.to(dtype)`` gives what the uncast
  float32 module gives on the same input, at positions past any table (3000): on ``dtype`` input
  and, for a half-precision cast, on float32 input (mixed-precision code feeds fp32 activations to
  a cast module), judged with ``dtype``'s tolerance. The module is cast before its first call (a
  cast that rounds θ shows when the table is then grown) and after one (a table grown in float32,
  then cast).
"""

import pytest
import torch

from specs import support as s

SEQ = 5
#: Offsets past bf16's (256) and fp16's (2048) exact integers, and far past both.
OFFSETS = (257, 2051, 70_001)
#: The decode length: past max_len (128) and past 256, one token per call from PREFILL on.
DECODE_LENGTHS = (300,)
CAST_OFFSET = 3000


@pytest.mark.claim("PATH-1", kinds=("rotary",), requires=lambda r: r.calling.protocol == "single" and r.calling.positions != "none")
def test_offset_path_equals_explicit_positions(record, dtype, device):
    module = s.build(record, dtype, device)
    x = s.randn(s.input_shape(record, 2, SEQ), seed=3, dtype=dtype, device=device)
    tol = record.tolerance(dtype)
    for offset in OFFSETS:
        offset = min(offset, s.position_cap(record, offset + SEQ) - SEQ)
        positions = torch.arange(offset, offset + SEQ, device=device)
        with torch.no_grad():
            by_offset = module(x, None, offset=offset).to(torch.float64)
            explicit = module(x, positions).to(torch.float64)
        s.require_within(error=s.disagreement(by_offset, explicit),
                         bound=tol.bound(float(explicit.nan_to_num(0, 0, 0).abs().max()), s.max_angle(positions, record.geometry)),
                         what=f"f(x, offset={offset}) ≠ f(x, positions={offset}…{offset + SEQ - 1})", offset=offset)


PREFILL = 4


def _decoded_keys_step_by_step(record, module, q, k, length):
    """A prefill of PREFILL tokens, then one token per call with the keys kept: ``(query, keys)``,
    the last step's query. Single protocol: q and k through the offset path; pair and cos/sin:
    ``(q_j, k_j)`` in one call of one token at position ``j`` (a library may count calls)."""
    device = q.device
    if record.calling.protocol == "single":
        keys = [module(k[:, :PREFILL], None, offset=0)] + [module(k[:, j : j + 1], None, offset=j)
                                                            for j in range(PREFILL, length)]
        return module(q[:, -1:], None, offset=length - 1), torch.cat(keys, dim=1)
    prefill = torch.arange(PREFILL, device=device)
    keys = [s.encode_pair(module, q[:, :PREFILL], k[:, :PREFILL], prefill, prefill)[1]]
    query = None
    for j in range(PREFILL, length):
        at = torch.tensor([j], device=device)
        query, key = s.encode_pair(module, q[:, j : j + 1], k[:, j : j + 1], at, at)
        keys.append(key)
    return query, torch.cat(keys, dim=1)


def _decoded_logits(record, module, q, k, length):
    """The last query's logits against keys cached one decoding step at a time, on each decoding
    path the protocol has: step by step, and for the pair protocol also the library's own
    cached-keys call (one query against all keys)."""
    last = torch.tensor([length - 1], device=q.device)
    geometry = record.geometry
    by_call = record.calling.protocol != "single" and geometry is not None and geometry.scale_length_dependent
    with torch.no_grad():
        paths = {}
        if not by_call:  # a scale centred on each call (x-transformers' xPos) makes one-token calls differ by design
            try:
                paths["step by step"] = _decoded_keys_step_by_step(record, module, q, k, length)
            except s.Excluded:
                if record.calling.protocol != "pair":
                    raise  # a pair library may take no positions: its own cached-keys call is still judged
        if record.calling.protocol == "pair":
            paths["one query against the cached keys"] = s.encode_pair(
                module, q[:, -1:], k, last, torch.arange(length, device=q.device))
    if not paths:
        raise s.Excluded(f"{record.name} reaches no decoding path")
    return {how: (s.as_heads(query).double().transpose(1, 2) @ s.as_heads(keys).double().permute(0, 2, 3, 1))[..., 0, :]
            for how, (query, keys) in paths.items()}


@pytest.mark.claim("PATH-2", kinds=("rotary",))
def test_decoding_against_cached_keys_gives_the_full_logits(record, dtype, device):
    """The full sequence and the decode each on a fresh module: a state one left for the other
    cannot make them agree (or differ)."""
    tol = record.tolerance(dtype)
    lengths = sorted({min(length, s.position_cap(record, length) + 1) for length in DECODE_LENGTHS})
    for length in lengths:
        q = s.randn(s.input_shape(record, 1, length), seed=length, dtype=dtype, device=device)
        k = s.randn(s.input_shape(record, 1, length), seed=length + 1, dtype=dtype, device=device)
        with torch.no_grad():
            fq, fk = s.encode_pair(_fresh(record, dtype, device), q, k, torch.arange(length, device=device),
                                   torch.arange(length, device=device))
        fq, fk = s.as_heads(fq).double(), s.as_heads(fk).double()
        full = (fq.transpose(1, 2) @ fk.permute(0, 2, 3, 1))[..., -1, :]
        scale = float((fq[:, -1:].abs().transpose(1, 2) @ fk.abs().permute(0, 2, 3, 1)).max())
        for how, decoded in _decoded_logits(record, _fresh(record, dtype, device), q, k, length).items():
            s.require_within(error=s.disagreement(decoded, full),
                             bound=2 * tol.bound(scale, s.max_angle(length, record.geometry)),
                             what=f"decoding the query at position {length - 1} against cached keys ({how}) gives "
                                  "other logits than the full sequence", length=length, path=how)


def _fresh(record, dtype, device):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return s.build(record, dtype, device)


def _seeded_build(record, device):
    """One build of the float32 module; every call gives the same weights (learned parts included)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return s.build(record, torch.float32, device)


@pytest.mark.claim("PATH-3", kinds=("rotary",), dtypes=(torch.float64, torch.float16, torch.bfloat16))
def test_cast_module_keeps_its_frequencies(record, dtype, device):
    if torch.float32 not in record.limits.dtypes:
        pytest.skip(f"{record.name} does not declare float32, the dtype cast from")
    offset = min(CAST_OFFSET, s.position_cap(record, CAST_OFFSET + SEQ) - SEQ)
    positions = torch.arange(offset, offset + SEQ)
    inputs = [dtype] + ([torch.float32] if dtype in (torch.float16, torch.bfloat16) else [])
    uncast, cast_first, used_then_cast = (_seeded_build(record, device) for _ in range(3))
    cast_first.to(dtype)  # before any call
    for input_dtype in inputs:
        x = s.randn(s.input_shape(record, 1, SEQ), seed=9, dtype=input_dtype, device=device)
        with torch.no_grad():
            expected = uncast(x, None, offset=offset).to(torch.float64)
            used_then_cast(x, None, offset=offset)
            outputs = {"before its first call": cast_first(x, None, offset=offset),
                       "after a call": used_then_cast.to(dtype)(x, None, offset=offset)}
            used_then_cast.to(torch.float32)
        bound = record.tolerance(dtype).bound(float(expected.nan_to_num(0, 0, 0).abs().max()),
                                              s.max_angle(positions, record.geometry))
        for when, cast in outputs.items():
            s.require_within(error=s.disagreement(cast.to(torch.float64), expected), bound=bound,
                             what=f"after module.to({dtype}) {when}, its output on {input_dtype} input at "
                                  f"positions {offset}… differs from the uncast module's")

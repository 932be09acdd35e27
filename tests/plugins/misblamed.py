"""Defects that specs once blamed on the wrong claim, each declared as the correct design it
imitates. ``tests/test_primary_blame.py`` runs the misfiring specs on them and checks each blame
lands on the claim that owns it:

* ``misblamed_fp16_positions`` - positions formed in float16 before the angles: past 65504 they
  are infinite and the output NaN, in every dtype (ROPE-10a's: far positions); ROPE-3 and ROPE-11
  once failed it there;
* ``misblamed_length_keyed_cache`` - cos/sin cached by the call's length, so a later call of the
  same length at other positions reads the first call's (ROPE-9's: a used module answers otherwise
  than a fresh one); ROPE-2 once read its frequencies off a used module and failed it;
* ``misblamed_attention_sees_next`` - causal attention whose mask lets each query see the next
  token (ATT-3's); ATT-2 once compared its weights with a causal softmax and failed it.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

import posenc
from posenc.encoders.attention import RoPEAttention
from posenc.harness.catalogue.record_builders import placed
from tests.plugins.defective_ropes import GEOMETRY, checked, inv_freq, rotate


def _positions(x, positions, offset):
    p = checked(x, positions, offset)
    return torch.arange(offset, offset + x.shape[1], device=x.device)[None] if p is None else p


class HalfPositions(torch.nn.Module):
    def __init__(self, head_dim, base):
        super().__init__()
        self.head_dim, self.base = head_dim, base

    def forward(self, x, positions=None, offset=0):
        p = _positions(x, positions, offset).to(torch.float16).to(torch.float32)  # the defect
        angles = p[..., None] * inv_freq(self.head_dim, self.base).to(x.device)
        return rotate(x, angles.cos(), angles.sin())


class LengthKeyedCache(torch.nn.Module):
    def __init__(self, head_dim, base):
        super().__init__()
        self.head_dim, self.base, self.cache = head_dim, base, {}

    def forward(self, x, positions=None, offset=0):
        p = _positions(x, positions, offset)
        key = (x.shape[1], x.device)
        if key not in self.cache:  # the defect: keyed by length, not by positions
            angles = p.to(torch.float32)[..., None] * inv_freq(self.head_dim, self.base).to(x.device)
            self.cache[key] = (angles.cos(), angles.sin())
        cos, sin = self.cache[key]
        return rotate(x, cos.expand(p.shape[0], -1, -1), sin.expand(p.shape[0], -1, -1))


class SeesTheNextToken(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q = self.rotary(q, positions, offset=offset)
        k = self.rotary(k, positions, offset=offset)
        n = q.shape[1]
        mask = torch.ones(n, k.shape[1], dtype=torch.bool, device=q.device).tril(1)  # the defect: tril(0) is due
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              attn_mask=mask).transpose(1, 2)


def _describe(name: str) -> str:
    return __doc__.split(f"``{name}`` - ")[1].split("\n* ")[0].replace("\n", " ").strip()


for _name, _build in (("misblamed_fp16_positions", lambda c: HalfPositions(c.head_dim, c.base)),
                      ("misblamed_length_keyed_cache", lambda c: LengthKeyedCache(c.head_dim, c.base))):
    posenc.register(posenc.EncoderRecord(
        name=_name, build=_build, kind="rotary", source="a misblamed defect (tests/plugins/misblamed.py)",
        geometry=GEOMETRY, claims=posenc.rotary_claims(), description=_describe(_name)))

_causal = posenc.get("attention_rope_causal")
posenc.register(dataclasses.replace(
    _causal, name="misblamed_attention_sees_next", source="a misblamed defect (tests/plugins/misblamed.py)",
    description=_describe("misblamed_attention_sees_next"), origin="plug-in",
    build=lambda c: placed(SeesTheNextToken(c.d_model, c.n_heads, base=c.base, causal=True), c)))

"""A RoPE that takes q and k together at one start offset, ``module(q, k, offset=0)``, as
flash-attn's and several inference libraries' rotary modules do (``positions="offset"`` with the
pair protocol): the harness reaches explicit positions through that offset path.

* ``rope_pair_by_offset``: correct; every claim holds.
* ``rope_pair_keys_at_zero``: rotates k from position 0 whatever the offset, the KV-cache slice
  taken at 0 instead of at the start position (executorch #2010): the relative-offset claims and
  decoding fail.
"""

import posenc
from posenc import RotaryEmbedding
from torch import nn


class PairByOffset(nn.Module):
    def __init__(self, head_dim, base=10000.0, keys_at_zero=False):
        super().__init__()
        self.rope, self.keys_at_zero = RotaryEmbedding(head_dim, base=base), keys_at_zero

    def forward(self, q, k, offset=0):
        return self.rope(q, offset=offset), self.rope(k, offset=0 if self.keys_at_zero else offset)


for name, keys_at_zero in (("rope_pair_by_offset", False), ("rope_pair_keys_at_zero", True)):
    posenc.register(posenc.EncoderRecord(
        name=name, build=lambda c, z=keys_at_zero: PairByOffset(c.head_dim, c.base, z).to(c.device),
        kind="rotary", protocol="pair", positions="offset", source="tests/plugins/offset_pair.py",
        geometry=posenc.RotaryGeometry(layout="interleaved"),
        claims=posenc.rotary_claims(),
    ))

#: The claims each encoder fails: keys at 0 break every relation between a query and a key at offsets,
#: and decoding step by step (each step's key rotated at 0, PATH-2); in every dtype alike, so not ROPE-11.
EXPECTED_FAILURES = {
    "rope_pair_by_offset": set(),
    "rope_pair_keys_at_zero": {"ROPE-1", "ROPE-4", "ROPE-10a", "ATT-4", "PATH-2"},
}

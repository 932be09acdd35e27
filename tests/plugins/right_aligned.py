"""Position ids longer than the sequence, in a library that validates no input.

* ``rope_right_aligned``: takes the last ``seq`` positions, a convention some libraries document
  (x-transformers: the tokens are the end of a longer sequence). A missing error, which its
  declaration excuses: the contract reads ``refuted``.
* ``rope_left_truncated``: takes the first ``seq`` (the ``cos[:seq_len]`` idiom applied to position
  ids): the answer is not the rotation at any positions the caller could mean, silent garbage,
  which no declaration excuses: the contract reads FAIL.
* ``rope_right_aligned_undeclared``: the first, with the default declarations: FAIL, its message
  naming the declaration that expresses the convention.
"""

import posenc
from posenc import RotaryEmbedding


class Aligned(RotaryEmbedding):
    def __init__(self, head_dim, base=10000.0, right=True):
        super().__init__(head_dim, base=base)
        self.right = right

    def forward(self, x, positions=None, *, offset=0):
        if positions is not None and positions.shape[-1] > x.shape[1]:
            positions = positions[..., -x.shape[1]:] if self.right else positions[..., : x.shape[1]]
        return super().forward(x, positions, offset=offset)


_CLAIMS = posenc.rotary_claims({
    posenc.CONTRACT: posenc.refuted("validates no position shape", specs=("test_rejects_positions_of_wrong_shape",)),
})
for name, right in (("rope_right_aligned", True), ("rope_left_truncated", False)):
    posenc.register(posenc.EncoderRecord(
        name=name, build=lambda c, right=right: Aligned(c.head_dim, c.base, right).to(c.device),
        kind="rotary", source="tests/plugins/right_aligned.py",
        geometry=posenc.RotaryGeometry(layout="interleaved"), claims=_CLAIMS,
    ))
posenc.register(posenc.EncoderRecord(
    name="rope_right_aligned_undeclared", build=lambda c: Aligned(c.head_dim, c.base, True).to(c.device),
    kind="rotary", source="tests/plugins/right_aligned.py", geometry=posenc.RotaryGeometry(layout="interleaved"),
    claims=posenc.rotary_claims(),
))

"""Defects of the hybrid (table then rotation) and the dynamic (mixed) encodings."""

from __future__ import annotations


from posenc import DynamicPositionalEncoding, HybridPositionalEncoding, angle_dtype
from posenc.encoders.positions import resolve_positions

from ._scaffold import mutant, placed


@mutant(
    "dynamic",
    fails={"DYN-3", "DYN-1"},
    why="the 0.5 : 0.5 mix is the wrong formula (DYN-3) at any positions (DYN-1)",
)
def dynamic_mix_half_half(c):
    """dynamic encoding mixing base and scaled rotations 0.5 : 0.5 instead of 0.7 : 0.3"""
    # 000 §5.3 fixes the mix at 0.7 : 0.3; a default of equal weights is the usual drift.
    return placed(DynamicPositionalEncoding(c.head_dim, c.max_len, base=c.base, mix=(0.5, 0.5),
                                             initial_scale=1.25), c)


class ScaleReadAsNumber(DynamicPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        scaled = pos.to(angle_dtype(x.dtype)) * self.dynamic_scale.item()  # .item() cuts the graph
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, scaled)


class ScaledPositionsRounded(DynamicPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        scaled = (pos.to(angle_dtype(x.dtype)) * self.dynamic_scale).round()  # round() has zero gradient
        base_weight, scaled_weight = self.mix
        return base_weight * self.base_encoder(x, pos) + scaled_weight * self.base_encoder(x, scaled)


@mutant(
    "dynamic",
    fails={"DYN-2", "DYN-1"},
    why="rounding s·p cuts the gradient (DYN-2) and moves the positions (DYN-1)",
)
def dynamic_scaled_positions_rounded(c):
    """s·p rounded to whole positions so it can index the sin/cos cache: s gets a zero gradient"""
    # 000 §5.3 passes s·p where a cache lookup wants integers; rounding makes the learned scale a step function.
    return placed(ScaledPositionsRounded(c.head_dim, c.max_len, base=c.base, initial_scale=1.25), c)


@mutant("dynamic", fails={"DYN-2"})
def dynamic_scale_read_with_item(c):
    """the learned scale read with .item(): s never receives a gradient"""
    # 000 §5.3 learns s; a Python float taken from a parameter detaches it from autograd.
    return placed(ScaleReadAsNumber(c.head_dim, c.max_len, base=c.base, initial_scale=1.25), c)


class TableNeverAdded(HybridPositionalEncoding):
    def forward(self, x, positions=None, *, offset=0):
        pos = resolve_positions(x.shape[0], x.shape[1], positions, offset, x.device)
        return self.rotary(x, pos)


@mutant("hybrid", fails={"ABS-2"})
def hybrid_table_never_added(c):
    """the hybrid's learnable table never reaches the output"""
    # 000 §5.1's snippet refers to an attribute that does not exist; deleting that line leaves plain RoPE.
    return placed(TableNeverAdded(c.d_model, c.n_heads, c.max_len, base=c.base), c)

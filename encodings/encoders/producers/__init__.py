"""The code that makes position ids, as training and inference stacks need it: M-RoPE id builders,
a vision tower's grid ids, a packing collator and context-parallel sharders. Each is called as its
protocol says (``posenc.harness.catalogue.records.PRODUCER_PROTOCOLS``).

* :class:`MRopeIdBuilder`: a batch's ``(3, batch, seq)`` ids and per-row deltas from the token
  types and grids (Qwen2-VL §2.1, Qwen2.5-VL §2.1.3), by :func:`~.mrope_positions.mrope_positions`;
* :func:`vision_grid_ids`: ``(row, col)`` of a tower's patches in merge-block order;
* :class:`PackingCollator`: documents in one row, positions restarting in each, ``cu_seq_lens`` and
  ``seq_idx``, padded to a multiple with the tokens on every axis;
* :class:`ContextParallelSharder`: a rank's tokens and global ids under a contiguous, head-tail
  (zigzag) or round-robin layout, and ``restore``.
"""

from .builders import MRopeIdBuilder, vision_grid_ids
from .packing import PackingCollator
from .sharding import ContextParallelSharder

__all__ = ["ContextParallelSharder", "MRopeIdBuilder", "PackingCollator", "vision_grid_ids"]

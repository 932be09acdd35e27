"""Hypothesis strategies shared by the specs. Argument names label every draw in a falsifying example."""

from hypothesis import strategies as st

seeds = st.integers(min_value=0, max_value=2**31 - 1)
#: Start positions of a short sequence (KV-cache offset).
offsets = st.integers(min_value=0, max_value=2048)
#: A common shift applied to every position (ROPE-4, ATT-4).
shifts = st.integers(min_value=1, max_value=10_000)
bases = st.sampled_from([10.0, 500.0, 10_000.0, 500_000.0]) | st.floats(min_value=2.0, max_value=1e6)
even_dims = st.integers(min_value=1, max_value=64).map(lambda half: 2 * half)
seq_lens = st.integers(min_value=1, max_value=12)


def position_lists(max_position: int, size: int = 6):
    """Explicit, possibly repeated and non-contiguous positions."""
    return st.lists(st.integers(min_value=0, max_value=max_position), min_size=size, max_size=size)

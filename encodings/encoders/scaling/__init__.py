"""Frequency-scaling variants of RoPE for long context.

:mod:`.frequencies` holds the schedules (NTK-aware, YaRN, Llama 3) as functions
``(rotary_dim, base) -> θ``; ``RotaryEmbedding(frequencies=..., magnitude=...)`` applies them.
Linear position interpolation is ``RotaryEmbedding(scaling_factor=s)`` in :mod:`..rotary`.
Same import rule as :mod:`posenc.encoders`.
"""

"""Frequency-scaling variants of RoPE for long context (NTK-aware, YaRN, Llama 3, …).

Linear position interpolation is ``RotaryEmbedding(scaling_factor=s)`` in :mod:`..rotary`.
Same import rule as :mod:`posenc.encoders`.
"""

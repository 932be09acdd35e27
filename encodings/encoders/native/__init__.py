"""Encoders whose kernels are C, compiled on the machine that runs them (:mod:`.build`)."""

from .inplace import InPlaceRotaryEmbedding

__all__ = ["InPlaceRotaryEmbedding"]

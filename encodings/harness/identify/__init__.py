"""Identify a RoPE from its outputs alone: its layout, frequencies, precision and limits, and the axis sections of a multi-axis RoPE."""

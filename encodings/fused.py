"""Fused RoPE backends (to be implemented)."""


def fused_records(rotary_claims) -> list[dict]:
    """Record fields of the fused RoPE encoders, registered with the built-ins."""
    return []

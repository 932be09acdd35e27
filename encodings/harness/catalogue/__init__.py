"""The records and what they declare: claims, states, record types and builders, the built-in and published records, the spec index and the registry."""

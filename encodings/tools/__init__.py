"""Tools run from the repository root: README generators and the phase-precision table.

* ``python -m posenc.tools.readme [--write]`` - the declared verdict matrix and the specs per claim;
* ``python -m posenc.tools.precision`` - RoPE's phase error at far positions by angle dtype.
"""

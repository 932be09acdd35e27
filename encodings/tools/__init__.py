"""Tools run from the repository root: the docs' generated sections and the phase-precision table.

* ``python -m posenc docs [--write]`` - every count, table and figure of README and docs/;
* ``python -m posenc.tools.screenshot`` - a PNG of an HTML report, in headless Chromium;
* ``python -m posenc.tools.precision`` - RoPE's phase error at far positions by angle dtype.
"""

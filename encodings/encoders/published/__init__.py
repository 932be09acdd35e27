"""The documents' own code, as published: each design in 000 and 004 run as written.

Only fixes that let the code run at all (a shape typo) belong here, each named in the
module's docstring. Everything else stays as published, so that the harness can show
which claims the published code breaks. Same import rule as :mod:`posenc.encoders`.
"""

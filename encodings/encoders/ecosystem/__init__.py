"""Adapters for other libraries' RoPEs (transformers, torchtune, x-transformers, …).

An adapter passes the library's own code paths through untouched: no fixing of dtype
handling, caches or bounds. Each library is an optional dependency, imported inside its
adapter module only. Same import rule as :mod:`posenc.encoders`, plus the adapted library.
"""

"""What every adapter module shares: the library's version, and a build that skips with the
install hint when the library is missing."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

import posenc

INSTALL_HINT = "pip install -e '.[ecosystem]'"
#: What the records' ``origin`` says, and what ``--plugin`` takes to load them again (reproducers).
ORIGIN = "posenc.ecosystem"

#: distribution name -> import name, for every library an adapter wraps.
LIBRARIES = {"transformers": "transformers", "torchtune": "torchtune", "x-transformers": "x_transformers",
             "rotary-embedding-torch": "rotary_embedding_torch", "megatron-core": "megatron.core"}


#: The contract specs a library that validates no input fails: a missing error, never silent garbage.
UNCHECKED_INPUT_SPECS = ("test_rejects_non_float_input", "test_rejects_wrong_rank", "test_rejects_negative_positions")


def validates_no_input(what: str) -> posenc.Declared:
    return posenc.refuted(what, specs=UNCHECKED_INPUT_SPECS)


def version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def library_versions() -> dict[str, str]:
    """Installed versions of the wrapped libraries (the report header shows them)."""
    return {name: version(name) or "not installed" for name in LIBRARIES}


def available(distribution: str) -> bool:
    try:
        importlib.import_module(LIBRARIES[distribution])
    except Exception:  # noqa: BLE001 - a broken install counts as missing, with the hint
        return False
    return True


def missing(distribution: str):
    """A build that skips the spec, naming the library and the install command."""

    def build(config):
        pytest.skip(f"{distribution} is not installed: {INSTALL_HINT}")

    return build

"""The spec run's process settings (``posenc.harness.cases.process``): glibc keeps freed memory for reuse."""

import platform
import sys

import pytest

from posenc.harness.cases import process


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_takes_the_allocator_settings():
    assert process.tune() is True

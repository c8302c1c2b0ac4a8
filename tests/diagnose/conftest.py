"""Evidence built from the healthy H200 bundle (:mod:`diagnose_samples`) with the items a test changes."""

from __future__ import annotations

import pytest
from diagnose_samples import EXPECT, healthy_files

from gpu_provision.doctor import DoctorExpectations, Evidence


@pytest.fixture
def evidence():
    """A function making evidence from the healthy H200 bundle with some items replaced (None removes one)."""

    def make(changes: dict[str, str | None] | None = None, host: str = "h200",
             expect: DoctorExpectations = EXPECT) -> Evidence:
        files = healthy_files(host)
        for name, value in (changes or {}).items():
            if value is None:
                files.pop(name, None)
            else:
                files[name] = value
        return Evidence(node=host, files=files, expect=expect)

    return make

"""Fixtures of the translation tests: the real SWORD modules (skipped with the reason when absent)."""

from __future__ import annotations

import pytest

from posenc.translation.corpus import DEFAULT_SOURCE, DEFAULT_TARGET
from posenc.translation.sword import ZTextModule

_MISSING = ("SWORD modules {name} not installed: run scripts/ensure-sword.sh "
            "(apt-get install sword-text-web sword-text-sparv) or set SWORD_PATH")


def _open(name: str) -> ZTextModule:
    try:
        return ZTextModule.open(name)
    except FileNotFoundError:
        pytest.skip(_MISSING.format(name=name))


@pytest.fixture(scope="session")
def web() -> ZTextModule:
    return _open(DEFAULT_SOURCE)


@pytest.fixture(scope="session")
def rv() -> ZTextModule:
    return _open(DEFAULT_TARGET)

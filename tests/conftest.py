"""Shared fixtures: every test gets a fresh, logged seed so failures can be replayed."""

from __future__ import annotations

import os
import random

import pytest
import torch


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A fresh random seed per test (set POSENC_TEST_SEED to replay one)."""
    value = int(os.environ.get("POSENC_TEST_SEED", random.SystemRandom().randrange(2**31)))
    torch.manual_seed(value)
    request.node.user_properties.append(("seed", value))
    print(f"seed={value}")
    return value


@pytest.fixture
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)

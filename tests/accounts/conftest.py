"""Accounts fixtures: a fresh key folder per test, fast hashing, an empty throttle cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache

from apps.accounts.keys import clear_keyring_cache


@pytest.fixture(autouse=True)
def _accounts_settings(settings: Any, tmp_path: Path) -> Iterator[Path]:
    key_dir = tmp_path / "keys"
    settings.RTC_JWT_ALGORITHM = "RS256"
    settings.RTC_JWT_KEY_DIR = key_dir
    settings.RTC_JWT_PRIVATE_KEY = ""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    clear_keyring_cache()
    cache.clear()  # the login throttle counts in the default cache
    yield key_dir
    clear_keyring_cache()


@pytest.fixture
def key_dir(_accounts_settings: Path) -> Path:
    return _accounts_settings

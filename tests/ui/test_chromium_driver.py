"""The browser tests need Debian's ``chromium``; without it they skip and say how to get it."""

from __future__ import annotations

import pytest

from .chromium import chromium_path


def test_without_chromium_the_browser_tests_skip_saying_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium_path()

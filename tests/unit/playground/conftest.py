"""Every playground unit test starts from PLAYGROUND unset (auto), whatever the shell says."""

import pytest


@pytest.fixture(autouse=True)
def _playground_setting_unset(monkeypatch):
    monkeypatch.delenv("PLAYGROUND", raising=False)

"""Fixtures the run-lock tests share."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from antler.runtime.storage.base import LOCK_POLL_SECONDS


@pytest.fixture
def polls(monkeypatch) -> list[str]:
    """Every poll-interval sleep a run takes, sync or async."""
    slept: list[str] = []
    sync_sleep, async_sleep = time.sleep, asyncio.sleep

    def counted_sleep(seconds: float) -> None:
        if seconds == LOCK_POLL_SECONDS:
            slept.append("sync")
        sync_sleep(seconds)

    async def counted_async_sleep(seconds: float, result: Any = None) -> Any:
        if seconds == LOCK_POLL_SECONDS:
            slept.append("async")
        return await async_sleep(seconds, result)

    monkeypatch.setattr(time, "sleep", counted_sleep)
    monkeypatch.setattr(asyncio, "sleep", counted_async_sleep)
    return slept

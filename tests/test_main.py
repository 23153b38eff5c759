"""``app.main``'s lifespan: what it starts, it stops, also when a later start fails."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from app.main import build_push_policy, create_app
from app.settings import Environment, Settings
from app.stores.log.local.files import CLEAN_SHUTDOWN


async def tasks_left(before: set[asyncio.Task[object]]) -> set[str]:
    """The app's background tasks (each named, as every service names its own) started since ``before`` and
    still running, once the cancellations already requested ran. Unnamed tasks are left out: the suite's
    other apps share this event loop and start tasks of their own meanwhile."""
    for _ in range(5):
        await asyncio.sleep(0)
    started = set(asyncio.all_tasks()) - before
    return {t.get_name() for t in started if not t.done() and not t.get_name().startswith("Task-")}


async def test_a_failed_start_closes_what_had_started(tmp_path: Path) -> None:
    # A damaged data directory: the server secret's file is a directory. The key authenticator fails to
    # start after the log engine and its maintenance already had.
    (tmp_path / "secret_key").mkdir()
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite+aiosqlite:///{tmp_path}/metadata.db")
    app = create_app(settings)
    before = set(asyncio.all_tasks())
    with pytest.raises(IsADirectoryError):
        async with app.router.lifespan_context(app):
            pytest.fail("the app started")
    # The log engine was closed cleanly (its marker says so), and no background task was left behind.
    assert (tmp_path / "log" / CLEAN_SHUTDOWN).exists()
    assert await tasks_left(before) == set()


async def test_a_clean_start_and_stop_leaves_nothing_running(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, database_url=f"sqlite+aiosqlite:///{tmp_path}/metadata.db", secret_key="s" * 40
    )
    app = create_app(settings)
    before = set(asyncio.all_tasks())
    async with app.router.lifespan_context(app):
        started = {t.get_name() for t in set(asyncio.all_tasks()) - before}
        assert "log-maintenance" in started
    assert (tmp_path / "log" / CLEAN_SHUTDOWN).exists()
    assert await tasks_left(before) == set()


class TestPushPolicy:
    """The push rules the broker is handed (it reads no settings itself)."""

    def test_production_settings_block_internal_addresses_and_carry_every_knob(self, tmp_path: Path) -> None:
        settings = Settings(
            environment=Environment.production,
            data_dir=tmp_path,
            secret_key=secrets.token_urlsafe(32),
            metrics_token=secrets.token_hex(16),
            push_allowed_hosts=["hooks.internal.example"],
            push_refresh_seconds=0.5,
            push_attempts_kept=50,
            push_breaker_threshold=3,
            push_breaker_max_seconds=30.0,
        )
        policy = build_push_policy(settings)
        assert policy.block_internal and policy.allowed_hosts == ("hooks.internal.example",)
        assert (policy.refresh_seconds, policy.attempts_kept) == (0.5, 50)
        assert (policy.breaker_threshold, policy.breaker_max_seconds) == (3, 30.0)
        assert policy.sealer.open(policy.sealer.seal("whsec_x")) == "whsec_x"

    def test_development_allows_internal_addresses(self, tmp_path: Path) -> None:
        assert not build_push_policy(Settings(data_dir=tmp_path)).block_internal

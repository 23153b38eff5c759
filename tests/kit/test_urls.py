"""app/kit/urls.py: a connection URL's password never shows."""

from __future__ import annotations

import pytest

from app.kit.urls import MASK, masked


class TestMasked:
    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("redis://:s3cret@127.0.0.1:6379/0", f"redis://:{MASK}@127.0.0.1:6379/0"),
            ("postgresql+asyncpg://qc:s3cret@db:5432/qc", f"postgresql+asyncpg://qc:{MASK}@db:5432/qc"),
            ("rediss://user:p%40ss@cache:6380/1", f"rediss://user:{MASK}@cache:6380/1"),
            ("nats://token-only@127.0.0.1:4250", f"nats://{MASK}@127.0.0.1:4250"),
        ],
    )
    def test_the_password_is_replaced_and_the_rest_kept(self, url: str, shown: str) -> None:
        assert masked(url) == shown

    def test_a_url_without_userinfo_is_returned_as_it_is(self) -> None:
        for url in ("redis://127.0.0.1:6379/0", "sqlite+aiosqlite:////tmp/qc.db", "nats://127.0.0.1:4250"):
            assert masked(url) == url

    def test_nats_seeds_are_masked_one_by_one(self) -> None:
        seeds = "nats://qc:a@127.0.0.1:4250,nats://127.0.0.2:4250,nats://qc:b@127.0.0.3:4250"
        assert (
            masked(seeds)
            == f"nats://qc:{MASK}@127.0.0.1:4250,nats://127.0.0.2:4250,nats://qc:{MASK}@127.0.0.3:4250"
        )

    def test_a_bad_port_is_no_reason_to_show_the_password(self) -> None:
        assert masked("redis://:s3cret@host:notaport/0") == f"redis://:{MASK}@host:notaport/0"

    def test_what_does_not_parse_is_masked_whole(self) -> None:
        """An unparsable URL may still hold a password: nothing of it is shown."""
        assert masked("redis://:s3cret@[::1/0") == MASK

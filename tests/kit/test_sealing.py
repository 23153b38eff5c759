"""Secrets at rest: sealed under the server secret, opened during a rotation, clear values from before."""

from __future__ import annotations

import base64

import pytest

from app.kit.sealing import Sealer, SealError


class TestSealer:
    def test_a_sealed_value_hides_the_secret_and_opens_again(self):
        sealer = Sealer(b"k" * 40)
        sealed = sealer.seal("whsec_abc")
        assert "whsec_abc" not in sealed and sealed.startswith("sealed:v1:")
        assert sealer.open(sealed) == "whsec_abc" and not sealer.stale(sealed)
        assert sealer.seal("whsec_abc") != sealed  # a fresh nonce each time

    def test_a_rotation_opens_the_old_and_marks_it_stale(self):
        old = Sealer(b"o" * 40).seal("whsec_abc")
        rotated = Sealer(b"n" * 40, previous=b"o" * 40)
        assert rotated.open(old) == "whsec_abc" and rotated.stale(old)
        with pytest.raises(SealError):
            Sealer(b"n" * 40).open(old)  # the previous key forgotten: it no longer opens

    def test_a_clear_value_from_before_sealing_opens_as_itself_and_is_stale(self):
        sealer = Sealer(b"k" * 40)
        assert sealer.open("whsec_plain") == "whsec_plain" and sealer.stale("whsec_plain")

    def test_tampering_is_detected(self):
        sealer = Sealer(b"k" * 40)
        sealed = sealer.seal("whsec_abc")
        # Flip one bit of the ciphertext itself (a base64 character may carry only padding bits).
        head, _, data = sealed.rpartition(":")
        raw = bytearray(base64.urlsafe_b64decode(data))
        raw[len(raw) // 2] ^= 0x01
        flipped = f"{head}:{base64.urlsafe_b64encode(bytes(raw)).decode()}"
        with pytest.raises(SealError):
            sealer.open(flipped)

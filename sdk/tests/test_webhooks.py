"""``queuecore.webhooks``: the Standard Webhooks spec's test vectors (standard-webhooks/standard-webhooks,
libraries/go/webhook_test.go: the same secret, id, payload and expected signature in every library)."""

from __future__ import annotations

import time

import pytest

from queuecore import WebhookVerificationError, webhooks

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
PAYLOAD = b'{"test": 2432232314}'
TOLERANCE = 5 * 60


def signed(timestamp: int, secret: str = SECRET) -> dict[str, str]:
    return {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": webhooks.sign(secret, MSG_ID, timestamp, PAYLOAD),
    }


class TestSign:
    def test_the_spec_vector(self):
        assert (
            webhooks.sign(SECRET, MSG_ID, 1614265330, PAYLOAD)
            == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        )

    def test_the_secret_without_its_prefix_signs_alike(self):
        assert webhooks.sign(SECRET.removeprefix("whsec_"), MSG_ID, 1614265330, PAYLOAD) == webhooks.sign(
            SECRET, MSG_ID, 1614265330, PAYLOAD
        )


class TestVerify:
    def test_a_valid_signature_answers_the_body(self):
        assert webhooks.verify(PAYLOAD, signed(int(time.time())), SECRET) == {"test": 2432232314}

    @pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
    def test_a_missing_header_is_refused(self, missing):
        headers = signed(int(time.time()))
        del headers[missing]
        with pytest.raises(WebhookVerificationError, match=missing):
            webhooks.verify(PAYLOAD, headers, SECRET)

    def test_an_invalid_signature_is_refused(self):
        headers = {
            **signed(int(time.time())),
            "webhook-signature": "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
        }
        with pytest.raises(WebhookVerificationError, match="no signature"):
            webhooks.verify(PAYLOAD, headers, SECRET)

    def test_a_changed_body_is_refused(self):
        with pytest.raises(WebhookVerificationError):
            webhooks.verify(b'{"test": 2432232315}', signed(int(time.time())), SECRET)

    def test_old_and_new_timestamps_are_refused(self):
        now = int(time.time())
        with pytest.raises(WebhookVerificationError, match="too old"):
            webhooks.verify(PAYLOAD, signed(now - TOLERANCE - 1), SECRET, now=now)
        with pytest.raises(WebhookVerificationError, match="future"):
            webhooks.verify(PAYLOAD, signed(now + TOLERANCE + 1), SECRET, now=now)

    def test_without_tolerance_any_time_passes_but_the_signature_still_counts(self):
        now = int(time.time())
        assert webhooks.verify(PAYLOAD, signed(now - 10 * TOLERANCE), SECRET, tolerance=None) is not None
        headers = {**signed(now), "webhook-timestamp": str(946684800)}  # signed for another time
        with pytest.raises(WebhookVerificationError):
            webhooks.verify(PAYLOAD, headers, SECRET, tolerance=None)

    def test_one_matching_signature_among_several_is_enough(self):
        headers = signed(int(time.time()))
        bogus = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
        headers["webhook-signature"] = " ".join(
            [bogus, "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", headers["webhook-signature"], bogus]
        )
        assert webhooks.verify(PAYLOAD, headers, SECRET) == {"test": 2432232314}

    def test_a_rotation_verifies_with_either_secret(self):
        new = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
        now = int(time.time())
        headers = signed(now)
        headers["webhook-signature"] += " " + webhooks.sign(new, MSG_ID, now, PAYLOAD)
        assert webhooks.verify(PAYLOAD, headers, new) == webhooks.verify(PAYLOAD, headers, SECRET)
        with pytest.raises(WebhookVerificationError):
            webhooks.verify(PAYLOAD, signed(now), new)

    def test_header_names_are_case_insensitive_in_a_plain_dict(self):
        headers = {k.title(): v for k, v in signed(int(time.time())).items()}
        assert webhooks.verify(PAYLOAD, headers, SECRET) == {"test": 2432232314}

    def test_agrees_with_the_reference_library(self):
        standardwebhooks = pytest.importorskip("standardwebhooks")
        headers = signed(int(time.time()))
        assert standardwebhooks.Webhook(SECRET).verify(PAYLOAD, headers) == {"test": 2432232314}

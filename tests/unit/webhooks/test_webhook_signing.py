"""Signing and verification of deliveries (webhooks/signing.py): a known HMAC vector, every
rejection reason, and the replay window."""

from __future__ import annotations

import pytest

from webhooks.signing import (
    BadSignature,
    MissingHeader,
    StaleTimestamp,
    sign,
    signed_headers,
    verify,
)

SECRET = "whsec-test"
TS = 1795597200
BODY = b'{"id":1}'
# printf '1795597200.{"id":1}' | openssl dgst -sha256 -hmac whsec-test
VECTOR = "v1=5cbfd85f408ac024e00bdeb07f7a58f4bd9434bd36621fab73cb6e118e6aa62a"


def headers(ts: int = TS, body: bytes = BODY, secret: str = SECRET) -> dict[str, str]:
    return signed_headers(secret, "0b7c5d8e-3f0e-4b4e-9a51-0a3c1f6e2d47", "vm_request.approved", ts, body)


def test_sign_matches_an_independent_hmac() -> None:
    assert sign(SECRET, TS, BODY) == VECTOR


def test_signed_headers() -> None:
    assert headers() == {
        "X-Portal-Webhook-Id": "0b7c5d8e-3f0e-4b4e-9a51-0a3c1f6e2d47",
        "X-Portal-Webhook-Event": "vm_request.approved",
        "X-Portal-Webhook-Timestamp": "1795597200",
        "X-Portal-Webhook-Signature": VECTOR,
    }


def test_verify_accepts_a_fresh_genuine_delivery_with_any_header_case() -> None:
    verify(SECRET, headers(), BODY, now=TS)
    lowered = {k.lower(): v for k, v in headers().items()}
    verify(SECRET, lowered, BODY, now=TS + 300)  # the edge of the window is inside
    verify(SECRET, lowered, BODY, now=TS - 300)


def test_one_matching_signature_among_several_is_enough() -> None:
    h = headers()
    h["X-Portal-Webhook-Signature"] = f"v1={'0' * 64}, {VECTOR}"
    verify(SECRET, h, BODY, now=TS)


@pytest.mark.parametrize("missing", ["X-Portal-Webhook-Timestamp", "X-Portal-Webhook-Signature"])
def test_missing_header(missing: str) -> None:
    h = headers()
    del h[missing]
    with pytest.raises(MissingHeader, match=missing):
        verify(SECRET, h, BODY, now=TS)
    h[missing] = "  "
    with pytest.raises(MissingHeader):
        verify(SECRET, h, BODY, now=TS)


@pytest.mark.parametrize(
    ("secret", "body", "signature"),
    [
        ("another-secret", BODY, None),  # wrong key
        (SECRET, b'{"id":2}', None),  # body changed in transit
        (SECRET, BODY, "v1=" + "0" * 64),  # forged
        (SECRET, BODY, VECTOR.removeprefix("v1=")),  # no scheme
        (SECRET, BODY, "v1=5cbfd85f\u00e9"),  # non-ASCII: rejected, not a TypeError
    ],
)
def test_bad_signature(secret: str, body: bytes, signature: str | None) -> None:
    h = headers()
    if signature is not None:
        h["X-Portal-Webhook-Signature"] = signature
    with pytest.raises(BadSignature):
        verify(secret, h, body, now=TS)


def test_a_changed_timestamp_breaks_the_signature() -> None:
    h = headers()
    h["X-Portal-Webhook-Timestamp"] = str(TS + 1000)
    with pytest.raises(BadSignature):
        verify(SECRET, h, BODY, now=TS + 1000)


def test_malformed_timestamp() -> None:
    h = headers()
    h["X-Portal-Webhook-Timestamp"] = "yesterday"
    with pytest.raises(BadSignature, match="not an integer"):
        verify(SECRET, h, BODY, now=TS)


@pytest.mark.parametrize("offset", [301, 3600, -301])
def test_replay_outside_the_tolerance_is_rejected(offset: int) -> None:
    with pytest.raises(StaleTimestamp, match="tolerance is 300 s"):
        verify(SECRET, headers(), BODY, now=TS + offset)


def test_custom_tolerance() -> None:
    verify(SECRET, headers(), BODY, tolerance_seconds=3600, now=TS + 3600)
    with pytest.raises(StaleTimestamp):
        verify(SECRET, headers(), BODY, tolerance_seconds=10, now=TS + 11)


def test_errors_share_one_base_class() -> None:
    from webhooks.signing import SignatureError

    assert issubclass(MissingHeader, SignatureError)
    assert issubclass(BadSignature, SignatureError)
    assert issubclass(StaleTimestamp, SignatureError)

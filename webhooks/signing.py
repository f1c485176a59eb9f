"""Signing and verification of webhook deliveries (docs/webhooks.md "Verifying a delivery").

Every POST carries::

    X-Portal-Webhook-Id:        <event UUID>        (the same on every retry and redelivery)
    X-Portal-Webhook-Event:     <event type>        e.g. vm_request.approved
    X-Portal-Webhook-Timestamp: <unix seconds>      when this attempt was signed
    X-Portal-Webhook-Signature: v1=<hex HMAC-SHA256(secret, f"{timestamp}." + body)>

The timestamp is inside the signed bytes, so a receiver that checks it against its own clock
(``verify``'s ``tolerance_seconds``) rejects a captured request replayed later. The signature
header may carry several comma-separated ``v1=`` values; one match is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

ID_HEADER = "X-Portal-Webhook-Id"
EVENT_HEADER = "X-Portal-Webhook-Event"
TIMESTAMP_HEADER = "X-Portal-Webhook-Timestamp"
SIGNATURE_HEADER = "X-Portal-Webhook-Signature"
SCHEME = "v1"
#: Default replay window of ``verify`` (seconds either side of the receiver's clock).
DEFAULT_TOLERANCE_SECONDS = 300


class SignatureError(Exception):
    """A delivery failed verification; the subclasses say why."""


class MissingHeader(SignatureError):
    """A required header is absent or empty."""


class BadSignature(SignatureError):
    """The timestamp is not an integer, or no ``v1=`` signature matches the body."""


class StaleTimestamp(SignatureError):
    """The signature is valid but its timestamp is outside the tolerance (a replay, or a clock
    that is far off)."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header value for ``body`` signed at ``timestamp``.

    Args:
        secret: the endpoint's secret (UTF-8 encoded as the HMAC key).
        timestamp: unix time in whole seconds.
        body: the exact request body bytes.

    Returns:
        ``"v1=<64 lower-case hex digits>"``: HMAC-SHA256 of ``f"{timestamp}.".encode() + body``.
    """
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SCHEME}={digest}"


def signed_headers(
    secret: str, event_id: str, event_type: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The four webhook headers of one attempt (see the module docstring)."""
    return {
        ID_HEADER: event_id,
        EVENT_HEADER: event_type,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> None:
    """Check a received delivery: signature first, then the timestamp's age.

    Args:
        secret: the endpoint's secret.
        headers: the request headers (names matched case-insensitively).
        body: the raw request body bytes, exactly as received (before any JSON parsing).
        tolerance_seconds: largest accepted difference between the timestamp and ``now``, in
            seconds, in either direction.
        now: the receiver's unix time in seconds (default: ``time.time()``).

    Raises:
        MissingHeader: no timestamp or no signature header.
        BadSignature: the timestamp is not an integer, or no ``v1=`` value matches.
        StaleTimestamp: the signature matches but the timestamp is more than
            ``tolerance_seconds`` away from ``now``.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    timestamp_text = (lowered.get(TIMESTAMP_HEADER.lower()) or "").strip()
    signature_text = (lowered.get(SIGNATURE_HEADER.lower()) or "").strip()
    if not timestamp_text:
        raise MissingHeader(f"missing header {TIMESTAMP_HEADER}")
    if not signature_text:
        raise MissingHeader(f"missing header {SIGNATURE_HEADER}")
    try:
        timestamp = int(timestamp_text)
    except ValueError:
        raise BadSignature(f"{TIMESTAMP_HEADER} is not an integer: {timestamp_text[:40]!r}") from None
    expected = sign(secret, timestamp, body).encode()
    # Bytes, not str: compare_digest refuses non-ASCII str, and a header may hold anything.
    candidates = [part.strip().encode("utf-8", "replace") for part in signature_text.split(",")]
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise BadSignature("signature does not match the body and timestamp")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_seconds:
        raise StaleTimestamp(
            f"timestamp {timestamp} is {int(current - timestamp)} s from now; "
            f"tolerance is {tolerance_seconds} s (replayed or clock skew)"
        )

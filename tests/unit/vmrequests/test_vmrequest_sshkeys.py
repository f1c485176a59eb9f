"""SSH public key validation (vmrequests/sshkeys.py): every accepted and refused kind, exact messages."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from django.core.exceptions import ValidationError

from tests.vmrequest_factories import ssh_public_key
from vmrequests.sshkeys import describe_ssh_key, parse_ssh_public_key, validate_ssh_public_key


def refused(text: str) -> tuple[str, str]:
    """(code, message) of the ValidationError ``text`` raises."""
    with pytest.raises(ValidationError) as info:
        validate_ssh_public_key(text)
    return str(info.value.code), info.value.messages[0]


def ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def sk_ed25519_line(comment: str = "yubikey") -> str:
    """A FIDO ``sk-ssh-ed25519@openssh.com`` public key (key, then the application string)."""
    raw = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    blob = ssh_string(b"sk-ssh-ed25519@openssh.com") + ssh_string(raw) + ssh_string(b"ssh:")
    return f"sk-ssh-ed25519@openssh.com {base64.b64encode(blob).decode()} {comment}"


def sk_ecdsa_line() -> str:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    blob = (
        ssh_string(b"sk-ecdsa-sha2-nistp256@openssh.com")
        + ssh_string(b"nistp256")
        + ssh_string(point)
        + ssh_string(b"ssh:")
    )
    return f"sk-ecdsa-sha2-nistp256@openssh.com {base64.b64encode(blob).decode()}"


# --- accepted -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "key_type", "bits"),
    [
        ("ed25519", "ssh-ed25519", 256),
        ("ecdsa256", "ecdsa-sha2-nistp256", 256),
        ("ecdsa384", "ecdsa-sha2-nistp384", 384),
        ("ecdsa521", "ecdsa-sha2-nistp521", 521),
    ],
)
def test_accepted_types(kind: str, key_type: str, bits: int) -> None:
    line = ssh_public_key(kind)
    assert validate_ssh_public_key(line) == line
    info = parse_ssh_public_key(line)
    assert (info.key_type, info.bits, info.comment) == (key_type, bits, "analyst@laptop")


@pytest.mark.parametrize("bits", [2048, 3072])
def test_rsa_2048_and_longer_accepted(bits: int) -> None:
    line = ssh_public_key("rsa", bits=bits)
    assert validate_ssh_public_key(line) == line
    assert parse_ssh_public_key(line).bits == bits


def test_security_key_types_accepted() -> None:
    """cryptography (>= 45) loads the FIDO types, so they are accepted."""
    ed = sk_ed25519_line()
    assert validate_ssh_public_key(ed) == ed
    assert parse_ssh_public_key(ed).bits == 256
    ecdsa = sk_ecdsa_line()
    assert validate_ssh_public_key(ecdsa) == ecdsa
    assert describe_ssh_key(ed).startswith("ED25519-SK (256 bits) yubikey, SHA256:")


def test_normalised_whitespace_and_no_comment() -> None:
    line = ssh_public_key("ed25519", comment="")
    key_type, blob = line.split()
    assert validate_ssh_public_key(f"\n  {key_type}\t {blob}  \r\n") == f"{key_type} {blob}"
    assert (
        validate_ssh_public_key(f"{key_type} {blob}  my   laptop key ") == f"{key_type} {blob} my laptop key"
    )


def test_describe_matches_ssh_keygen_fingerprint() -> None:
    line = ssh_public_key("ed25519")
    blob = line.split()[1]
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode().rstrip("=")
    assert describe_ssh_key(line) == f"ED25519 (256 bits) analyst@laptop, SHA256:{digest}"
    assert len(digest) == 43
    rsa = ssh_public_key("rsa", comment="", bits=2048)
    assert describe_ssh_key(rsa).startswith("RSA (2048 bits), SHA256:")
    assert describe_ssh_key(ssh_public_key("ecdsa384", comment="x")).startswith("ECDSA (384 bits) x, SHA256:")


def test_known_fingerprint() -> None:
    """The fingerprint of a fixed key body (the all-zero Ed25519 point), as ssh-keygen -l prints it."""
    blob = base64.b64encode(ssh_string(b"ssh-ed25519") + ssh_string(bytes(32))).decode()
    expected = base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode().rstrip("=")
    info = parse_ssh_public_key(f"ssh-ed25519 {blob}")
    assert info.fingerprint == f"SHA256:{expected}"
    assert blob == "AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"


# --- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\n"])
def test_empty(text: str) -> None:
    assert refused(text) == ("empty", "Paste your SSH public key.")


PRIVATE_MESSAGE = (
    "This is a PRIVATE key: never share it. Paste the public key instead (the .pub file, "
    "e.g. ~/.ssh/id_ed25519.pub), and consider this private key exposed."
)


@pytest.mark.parametrize(
    "header",
    [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----",
        "PuTTY-User-Key-File-3: ssh-ed25519",
    ],
)
def test_private_key_refused(header: str) -> None:
    assert refused(f"{header}\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END-----\n") == (
        "private",
        PRIVATE_MESSAGE,
    )


def test_real_private_key_refused() -> None:
    pem = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        .decode()
    )
    assert refused(pem) == ("private", PRIVATE_MESSAGE)


def test_more_than_one_key() -> None:
    one, two = ssh_public_key(), ssh_public_key(comment="other")
    message = "Paste exactly one public key, on one line."
    assert refused(f"{one}\n{two}") == ("multiple", message)
    assert refused(f"{one} {two}") == ("multiple", message)


@pytest.mark.parametrize(
    "options",
    ['command="/bin/date"', "no-pty", 'from="10.0.0.0/8",no-agent-forwarding', 'command="echo hi there"'],
)
def test_authorized_keys_options_refused(options: str) -> None:
    assert refused(f"{options} {ssh_public_key()}") == (
        "options",
        "authorized_keys options are not allowed: paste only the key, starting with its type (e.g. ssh-ed25519).",
    )


def test_unknown_type() -> None:
    assert refused("ssh-foo AAAAB3NzaC1yc2E me") == (
        "unknown_type",
        "Unsupported key type “ssh-foo”. Use one of: ssh-ed25519, ecdsa-sha2-nistp256, "
        "ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, ssh-rsa, sk-ssh-ed25519@openssh.com, "
        "sk-ecdsa-sha2-nistp256@openssh.com.",
    )


def test_certificate_refused() -> None:
    assert refused("ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQ= me") == (
        "certificate",
        "SSH certificates are not accepted: paste the plain public key.",
    )


def test_rfc4716_refused() -> None:
    text = (
        '---- BEGIN SSH2 PUBLIC KEY ----\nComment: "me"\nAAAAC3NzaC1lZDI1NTE5\n---- END SSH2 PUBLIC KEY ----'
    )
    assert refused(text) == (
        "rfc4716",
        "This key is in RFC 4716 (SSH2) format. Convert it to one OpenSSH line with "
        "“ssh-keygen -i -f key.pub” and paste that.",
    )


@pytest.mark.parametrize(
    "text",
    [
        "ssh-ed25519 AAAA",  # cut off
        "ssh-ed25519 not*base64!",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAA",  # truncated body
    ],
)
def test_unparsable(text: str) -> None:
    assert refused(text) == (
        "invalid",
        "This is not a valid ssh-ed25519 public key: the key body does not parse (was it cut off?).",
    )


def test_type_and_body_disagree() -> None:
    blob = ssh_public_key("ed25519").split()[1]
    assert refused(f"ssh-rsa {blob}") == (
        "invalid",
        "This is not a valid ssh-rsa public key: the key body does not parse (was it cut off?).",
    )


def test_missing_body() -> None:
    assert refused("ssh-ed25519") == ("invalid", "The key is incomplete: its base64 body is missing.")


def test_dsa_refused() -> None:
    blob = base64.b64encode(ssh_string(b"ssh-dss") + ssh_string(b"\x01" * 129)).decode()
    assert refused(f"ssh-dss {blob} old@box") == (
        "dsa",
        "DSA keys (ssh-dss) are insecure and disabled by OpenSSH. Use an Ed25519 key.",
    )


def test_short_rsa_refused_with_its_length() -> None:
    assert refused(ssh_public_key("rsa", bits=1024)) == (
        "rsa_too_short",
        "This RSA key has 1024 bits; at least 2048 are required. Use an Ed25519 key.",
    )


def test_describe_refuses_bad_keys() -> None:
    with pytest.raises(ValidationError):
        describe_ssh_key("no key here")

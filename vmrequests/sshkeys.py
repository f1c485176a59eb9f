"""SSH public keys pasted into the request form: validated with ``cryptography``, never by hand.

The key ends up in the VM's cloud-init ``ssh_authorized_keys``, so it must be exactly one plain
public key in OpenSSH format (``type base64 [comment]``, one line). Refused, each with its own
message: an empty field, a private key (PEM/OpenSSH ``-----BEGIN ... PRIVATE KEY-----`` or a PuTTY
``.ppk``), several keys, ``authorized_keys`` options before the key (``command="..."``,
``no-pty``, ...: the portal decides what the key may do), RFC 4716 (``---- BEGIN SSH2 PUBLIC KEY
----``) and certificates, a body that does not parse, DSA (``ssh-dss``: OpenSSH 7.0+ disables it
by default) and RSA keys shorter than 2048 bits (NIST SP 800-131A; OpenSSH 8.8+ refuses < 1024).
Accepted: ``ssh-ed25519``, ``ecdsa-sha2-nistp256/384/521``, ``ssh-rsa`` ≥ 2048 bits, and the
FIDO security-key types ``sk-ssh-ed25519@openssh.com`` / ``sk-ecdsa-sha2-nistp256@openssh.com``
(``cryptography`` ≥ 45 loads them).

Sizes: the whole line is at most ``MAX_PUBLIC_KEY_LENGTH`` (8,192) characters and its comment at
most ``MAX_COMMENT_LENGTH`` (1,024). OpenSSH keys are far smaller: the key blob is the RFC 4253
§6.6 encoding (``string`` type, then the key's ``mpint``/``string`` fields), so the largest key
OpenSSH accepts, RSA with a 16,384-bit modulus (``SSH_RSA_MAXIMUM_MODULUS_SIZE`` in OpenSSH's
``sshkey.h``), is a 2,071-byte blob, 2,764 base64 characters; Ed25519 is 68. RFC 4716 §3.3 bounds
a key file's header values, the comment among them, to 1,024 bytes. Type + blob + comment of
that size stay under 4 KiB; 8 KiB leaves room, and was OpenSSH's own limit on an
``authorized_keys`` line (``SSH_MAX_PUBKEY_BYTES`` 8192, raised to 16384 later). The caps keep a pasted 2 MB "comment" out of
the database, the mails and the VMI's cloud-init user data.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
from django.utils.translation import gettext as _

#: Smallest RSA modulus accepted (bits).
MIN_RSA_BITS = 2048
#: Longest accepted key line, type + base64 blob + comment (characters; module docstring).
MAX_PUBLIC_KEY_LENGTH = 8192
#: Longest accepted key comment (characters, whitespace collapsed; RFC 4716 §3.3).
MAX_COMMENT_LENGTH = 1024

#: Accepted key types → the name ``ssh-keygen -l`` prints for them.
ACCEPTED_TYPES = {
    "ssh-ed25519": "ED25519",
    "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA",
    "ecdsa-sha2-nistp521": "ECDSA",
    "ssh-rsa": "RSA",
    "sk-ssh-ed25519@openssh.com": "ED25519-SK",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK",
}
#: Refused key types (recognised, so the message can say why).
DSA_TYPE = "ssh-dss"
KNOWN_TYPES = frozenset({*ACCEPTED_TYPES, DSA_TYPE})


@dataclass(frozen=True)
class SshKeyInfo:
    """A validated public key.

    Attributes:
        key_type: e.g. ``"ssh-ed25519"``. blob: the base64 body as pasted (validated).
        comment: the rest of the line, whitespace collapsed (``""`` when none).
        bits: key size in bits (RSA modulus, EC curve size, 256 for Ed25519).
    """

    key_type: str
    blob: str
    comment: str
    bits: int

    @property
    def normalized(self) -> str:
        """``"type base64 [comment]"`` on one line."""
        return " ".join(p for p in (self.key_type, self.blob, self.comment) if p)

    @property
    def fingerprint(self) -> str:
        """``"SHA256:<base64 of SHA-256 of the key blob, no padding>"`` (as ``ssh-keygen -l``)."""
        digest = hashlib.sha256(base64.b64decode(self.blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def _is_private_key(text: str) -> bool:
    if "PuTTY-User-Key-File" in text:
        return True
    return any(
        line.strip().startswith("-----BEGIN") and "PRIVATE KEY-----" in line for line in text.splitlines()
    )


def _key_bits(key: object) -> int:
    if isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        return key.key_size
    if isinstance(key, ed25519.Ed25519PublicKey):
        return 256
    return 0  # pragma: no cover - only the types above load for ACCEPTED_TYPES


def parse_ssh_public_key(text: str) -> SshKeyInfo:
    """Validate one pasted OpenSSH public key and return what it is.

    Args:
        text: what the user pasted (surrounding whitespace and line breaks are ignored).

    Returns:
        ``SshKeyInfo``.

    Raises:
        ValidationError: with a translated message and a code: ``empty``, ``private``,
            ``multiple``, ``options``, ``rfc4716``, ``certificate``, ``unknown_type``,
            ``invalid``, ``dsa``, ``rsa_too_short``, ``max_length`` (longer than
            ``MAX_PUBLIC_KEY_LENGTH``), ``comment_too_long`` (comment longer than
            ``MAX_COMMENT_LENGTH``).
    """
    text = (text or "").strip()
    _refuse_what_is_not_one_key(text)
    tokens = text.split()
    _refuse_key_type(tokens)
    key_type, blob = tokens[0], tokens[1]
    bits = _load_bits(key_type, blob)
    comment = " ".join(tokens[2:])
    if len(comment) > MAX_COMMENT_LENGTH:
        raise ValidationError(
            _(
                "The key's comment has %(n)s characters; at most %(max)s are allowed. Shorten it: it is only a label."
            )
            % {"n": len(comment), "max": MAX_COMMENT_LENGTH},
            code="comment_too_long",
        )
    return SshKeyInfo(key_type=key_type, blob=blob, comment=comment, bits=bits)


def _refuse_what_is_not_one_key(text: str) -> None:
    """Codes ``empty``, ``max_length``, ``private``, ``rfc4716``, ``multiple`` (several lines)."""
    if not text:
        raise ValidationError(_("Paste your SSH public key."), code="empty")
    MaxLengthValidator(MAX_PUBLIC_KEY_LENGTH)(text)
    if _is_private_key(text):
        raise ValidationError(
            _(
                "This is a PRIVATE key: never share it. Paste the public key instead (the .pub file, "
                "e.g. ~/.ssh/id_ed25519.pub), and consider this private key exposed."
            ),
            code="private",
        )
    if text.startswith("---- BEGIN SSH2 PUBLIC KEY"):
        raise ValidationError(
            _(
                "This key is in RFC 4716 (SSH2) format. Convert it to one OpenSSH line with "
                "“ssh-keygen -i -f key.pub” and paste that."
            ),
            code="rfc4716",
        )
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        raise ValidationError(_("Paste exactly one public key, on one line."), code="multiple")


def _refuse_key_type(tokens: list[str]) -> None:
    """Codes ``options``, ``certificate``, ``unknown_type``, ``dsa``, ``invalid`` (no body),
    ``multiple`` (two keys on one line)."""
    key_type = tokens[0]
    if key_type not in KNOWN_TYPES:
        if any(t in KNOWN_TYPES for t in tokens[1:]):
            raise ValidationError(
                _(
                    "authorized_keys options are not allowed: paste only the key, starting with its "
                    "type (e.g. ssh-ed25519)."
                ),
                code="options",
            )
        if "-cert-v01@openssh.com" in key_type:
            raise ValidationError(
                _("SSH certificates are not accepted: paste the plain public key."), code="certificate"
            )
        raise ValidationError(
            _("Unsupported key type “%(type)s”. Use one of: %(types)s.")
            % {"type": key_type[:60], "types": ", ".join(ACCEPTED_TYPES)},
            code="unknown_type",
        )
    if key_type == DSA_TYPE:
        raise ValidationError(
            _("DSA keys (ssh-dss) are insecure and disabled by OpenSSH. Use an Ed25519 key."), code="dsa"
        )
    if len(tokens) < 2:
        raise ValidationError(_("The key is incomplete: its base64 body is missing."), code="invalid")
    if any(t in KNOWN_TYPES for t in tokens[2:]):
        raise ValidationError(_("Paste exactly one public key, on one line."), code="multiple")


def _load_bits(key_type: str, blob: str) -> int:
    """The key's size in bits, loaded with ``cryptography``; codes ``invalid``, ``rsa_too_short``."""
    try:
        base64.b64decode(blob, validate=True)
        key = serialization.load_ssh_public_key(f"{key_type} {blob}".encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, binascii.Error, UnicodeEncodeError):
        raise ValidationError(
            _("This is not a valid %(type)s public key: the key body does not parse (was it cut off?).")
            % {"type": key_type},
            code="invalid",
        ) from None
    bits = _key_bits(key)
    if key_type == "ssh-rsa" and bits < MIN_RSA_BITS:
        raise ValidationError(
            _("This RSA key has %(bits)s bits; at least %(min)s are required. Use an Ed25519 key.")
            % {"bits": bits, "min": MIN_RSA_BITS},
            code="rsa_too_short",
        )
    return bits


def validate_ssh_public_key(text: str) -> str:
    """Validate one pasted OpenSSH public key (module docstring for the rules).

    Returns:
        The normalised key ``"type base64 [comment]"`` on one line.

    Raises:
        ValidationError: why the key is refused (``parse_ssh_public_key``).
    """
    return parse_ssh_public_key(text).normalized


def describe_ssh_key(text: str) -> str:
    """A key for display: ``"ED25519 (256 bits) analyst@laptop, SHA256:<fingerprint>"``
    (``"RSA (3072 bits), SHA256:..."`` when there is no comment).

    Raises:
        ValidationError: the key is refused (``parse_ssh_public_key``).
    """
    info = parse_ssh_public_key(text)
    head = _("%(kind)s (%(bits)s bits)") % {"kind": ACCEPTED_TYPES[info.key_type], "bits": info.bits}
    if info.comment:
        head = f"{head} {info.comment}"
    return f"{head}, {info.fingerprint}"

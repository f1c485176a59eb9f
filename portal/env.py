"""Typed readers for the portal's environment variables.

Every setting comes from the environment (see ``docs/configuration.md``). A value that
cannot be parsed raises :class:`django.core.exceptions.ImproperlyConfigured` naming the
variable, so a typo stops the process at start-up instead of silently meaning "false".
Parsing of URLs (``DATABASE_URL``, ``EMAIL_URL``) is delegated to django-environ.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from email.utils import parseaddr
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.validators import validate_email

# Aliases: the methods below are named after the builtins they return.
_Str = str
_List = list
_Bool = bool

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class Env:
    """Reads variables from a mapping (``os.environ`` by default) with strict parsing.

    Args:
        source: the variables to read; tests pass a plain dict.
    """

    def __init__(self, source: Mapping[_Str, _Str] | None = None) -> None:
        self.source: Mapping[_Str, _Str] = os.environ if source is None else source

    def raw(self, name: _Str) -> _Str | None:
        """Return the stripped value, or None when unset or empty."""
        value = self.source.get(name)
        if value is None or not value.strip():
            return None
        return value.strip()

    def str(self, name: _Str, default: _Str | None = None, *, required: bool = False) -> _Str:
        """Return a string value.

        Raises:
            ImproperlyConfigured: when ``required`` and the variable is unset or empty.
        """
        value = self.raw(name)
        if value is None:
            if required or default is None:
                raise ImproperlyConfigured(f"{name} must be set")
            return default
        return value

    def bool(self, name: _Str, default: bool) -> bool:
        """Return a boolean from ``1/true/yes/on`` or ``0/false/no/off`` (any case).

        Raises:
            ImproperlyConfigured: on any other value, e.g. ``DEBUG=maybe``.
        """
        value = self.raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")

    def int(self, name: _Str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        """Return an integer within optional bounds.

        Raises:
            ImproperlyConfigured: when the value is not an integer or is out of bounds.
        """
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
        if minimum is not None and number < minimum:
            raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
        if maximum is not None and number > maximum:
            raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}")
        return number

    def list(self, name: _Str, default: _List[_Str]) -> _List[_Str]:
        """Return a comma-separated list with blanks dropped (``"a, b,"`` → ``["a", "b"]``)."""
        value = self.raw(name)
        if value is None:
            return list(default)
        return [item.strip() for item in value.split(",") if item.strip()]

    def choice(
        self, name: _Str, default: _Str, choices: tuple[_Str, ...], *, case_insensitive: _Bool = False
    ) -> _Str:
        """Return one of ``choices`` (matched ignoring case when ``case_insensitive``).

        Raises:
            ImproperlyConfigured: for any other value.
        """
        value = self.raw(name)
        if value is None:
            return default
        if case_insensitive:
            value = next((choice for choice in choices if choice.lower() == value.lower()), value)
        if value not in choices:
            raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}")
        return value

    def networks(
        self, name: _Str, default: _List[_Str]
    ) -> _List[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """Return a list of CIDR networks (``"127.0.0.1/32,::1/128"``).

        Raises:
            ImproperlyConfigured: when an entry is not a network.
        """
        result = []
        for item in self.list(name, default):
            try:
                result.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ImproperlyConfigured(
                    f"{name}: {item!r} is not an IP network (e.g. 10.0.0.0/8)"
                ) from None
        return result

    def database(self, name: _Str, default: _Str) -> dict[_Str, Any]:
        """Return a Django ``DATABASES['default']`` dict parsed from a database URL.

        Only ``sqlite://`` and ``postgres://``/``postgresql://`` are supported.

        Raises:
            ImproperlyConfigured: for another scheme or an unparsable URL.
        """
        url = self.raw(name) or default
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in {"sqlite", "postgres", "postgresql", "pgsql"}:
            raise ImproperlyConfigured(
                f"{name}={url!r}: unsupported scheme {scheme!r} (use sqlite:///path or postgres://user:pw@host/db)"
            )
        try:
            config: dict[_Str, Any] = environ.Env.db_url_config(url)
        except Exception as exc:  # django-environ raises several types for bad URLs
            raise ImproperlyConfigured(f"{name} could not be parsed: {exc}") from exc
        if scheme != "sqlite" and not config.get("NAME"):
            raise ImproperlyConfigured(f"{name}={url!r} names no database")
        return config

    def mailer(self, name: _Str, default: _Str) -> dict[_Str, Any]:
        """Return a Django ``MAILERS`` entry parsed from a mail URL (django-environ's schemes).

        ``smtp://user:password@host:port`` (plain), ``smtp+tls://`` or ``smtps://`` (STARTTLS),
        ``smtp+ssl://`` (implicit TLS), ``consolemail://``, ``filemail:////absolute/dir``,
        ``memorymail://``, ``dummymail://``. User and password are percent-decoded. The only
        query option is ``timeout`` (seconds, ≥ 1, SMTP only). Error messages never repeat the
        URL, which may hold a password.

        Returns:
            ``{"BACKEND": dotted path, "OPTIONS": {...}}``; SMTP options: ``host``, ``use_tls``,
            ``use_ssl`` and, when given, ``port`` (else Django picks 25, 587 with TLS, 465 with
            SSL), ``username``, ``password``, ``timeout``; filemail: ``file_path``.

        Raises:
            ImproperlyConfigured: unknown scheme, unparsable port, SMTP without a host, filemail
                without a directory, or an unknown, malformed or misplaced query option.
        """
        url = self.raw(name) or default
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in environ.Env.EMAIL_SCHEMES:
            raise ImproperlyConfigured(
                f"{name}: unsupported scheme {scheme!r} (use smtp://, smtp+tls://, smtp+ssl://, "
                "consolemail://, filemail:////dir, memorymail:// or dummymail://)"
            )
        base, _sep, query = url.partition("?")
        smtp = scheme.startswith("smtp")
        timeout = _mail_timeout(name, query, smtp)
        try:
            parsed: dict[_Str, Any] = environ.Env.email_url_config(base)
        except Exception as exc:  # django-environ raises ValueError for a bad port
            raise ImproperlyConfigured(f"{name} could not be parsed: {exc}") from None
        options: dict[_Str, Any] = {}
        if smtp:
            options = _smtp_options(name, parsed, timeout)
        elif scheme == "filemail":
            if not parsed.get("EMAIL_FILE_PATH"):
                raise ImproperlyConfigured(f"{name}: filemail needs a directory (filemail:////var/mail)")
            options = {"file_path": parsed["EMAIL_FILE_PATH"]}
        return {"BACKEND": parsed["EMAIL_BACKEND"], "OPTIONS": options}

    def email_address(self, name: _Str, default: _Str) -> _Str:
        """Return a sender address, bare (``portal@example.com``) or named
        (``GPU Portal <portal@example.com>``); ``user@localhost`` is accepted.

        Raises:
            ImproperlyConfigured: when the address part is not a valid email address.
        """
        value = self.raw(name) or default
        address = parseaddr(value)[1]
        try:
            validate_email(address)
        except ValidationError:
            raise ImproperlyConfigured(
                f"{name}={value!r} is not an email address (e.g. gpu-portal@example.com)"
            ) from None
        return value

    def http_url(self, name: _Str, default: _Str) -> _Str:
        """Return an ``http://`` or ``https://`` URL with a host, trailing slashes stripped
        (``"https://portal.example.com/"`` → ``"https://portal.example.com"``).

        Raises:
            ImproperlyConfigured: another scheme, no host, or a query or fragment.
        """
        raw = self.raw(name) or default
        value = raw.rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query or parts.fragment:
            raise ImproperlyConfigured(
                f"{name}={raw!r} must be an http:// or https:// URL with a host and no query "
                "(e.g. https://portal.example.com)"
            )
        return value


def _mail_timeout(name: str, query: str, smtp: bool) -> int | None:
    """The ``timeout`` option (seconds, ≥ 1) of a mail URL's query; None when absent.

    Raises:
        ImproperlyConfigured: another option, an option on a non-SMTP URL, or a bad value.
    """
    timeout: int | None = None
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key.lower() != "timeout" or not smtp:
            raise ImproperlyConfigured(f"{name}: unknown option {key!r} (SMTP only: timeout=<seconds>)")
        try:
            timeout = int(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: timeout={value!r} is not an integer") from None
        if timeout < 1:
            raise ImproperlyConfigured(f"{name}: timeout must be at least 1 second")
    return timeout


def _smtp_options(name: str, parsed: dict[str, Any], timeout: int | None) -> dict[str, Any]:
    """The SMTP backend's ``OPTIONS`` from django-environ's parsed mail URL (see ``Env.mailer``).

    Raises:
        ImproperlyConfigured: the URL names no host.
    """
    if not parsed.get("EMAIL_HOST"):
        raise ImproperlyConfigured(f"{name}: an SMTP URL needs a host (smtp://user:password@host:port)")
    options: dict[str, Any] = {
        "host": parsed["EMAIL_HOST"],
        "use_tls": bool(parsed.get("EMAIL_USE_TLS", False)),
        "use_ssl": bool(parsed.get("EMAIL_USE_SSL", False)),
    }
    extra = {
        "port": parsed.get("EMAIL_PORT"),
        "username": parsed.get("EMAIL_HOST_USER"),
        "password": parsed.get("EMAIL_HOST_PASSWORD"),
        "timeout": timeout,
    }
    options.update({k: v for k, v in extra.items() if v is not None})
    return options

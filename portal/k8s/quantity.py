"""Kubernetes resource quantities: the one parser every caller uses.

Grammar of ``k8s.io/apimachinery/pkg/api/resource.Quantity`` (``quantity.go``, ``ParseQuantity``)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>        (sign: "+" or "-")
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (a whole exponent)

No whitespace is allowed anywhere, and ``E`` alone is the decimal suffix exa (``"1E"`` = 10¹⁸)
while ``E`` followed by digits is an exponent (``"1E3"`` = 1000), as in the Go parser.
Node ``status.allocatable`` and pod ``resources.requests`` values arrive in this form; the API
server writes them in canonical form (``"8"``, ``"1k"``), but hand-written manifests may use any.
JSON occasionally carries a bare integer, which is accepted as such.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_count", "parse_quantity"]

_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?"
)
#: Suffix → multiplier: milli, then the decimal SI powers of 1000 (k = 10³ … E = 10¹⁸) and the
#: binary ones of 1024 (Ki = 2¹⁰ … Ei = 2⁶⁰), in the order of ``<decimalSI>`` and ``<binarySI>``.
_SUFFIX: dict[str, Decimal] = {
    "m": Decimal("0.001"),
    **{prefix: Decimal(10) ** (3 * power) for power, prefix in enumerate("kMGTPE", start=1)},
    **{prefix + "i": Decimal(2) ** (10 * power) for power, prefix in enumerate("KMGTPE", start=1)},
}


def parse_quantity(value: str | int) -> Decimal:
    """Parse a Kubernetes quantity into its exact value in base units.

    Args:
        value: the raw quantity (``"500m"``, ``"16Gi"``, ``"1k"``, ``"2e3"``), or an int.

    Returns:
        The exact value, e.g. ``parse_quantity("500m") == Decimal("0.5")``,
        ``parse_quantity("1Ki") == 1024``.

    Raises:
        ValueError: not a quantity (empty, whitespace, unknown suffix, ``"1.5.2"``, a bool).
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    match = _QUANTITY.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"not a quantity: {value!r}") from exc
    if match["exp"]:
        return number.scaleb(int(match["exp"][1:]))
    if match["suffix"]:
        return number * _SUFFIX[match["suffix"]]
    return number


def parse_count(value: str | int) -> int:
    """Parse a quantity that must be a whole, non-negative number of devices.

    Extended resources (``nvidia.com/*``) are whole numbers: the API server refuses fractional
    extended-resource requests on pods, and device plugins advertise whole counts (DOMAIN.md §2).

    Args:
        value: the raw quantity (``"8"``, ``"1k"``, ``"2e3"``, ``"2000m"``) or an int.

    Returns:
        The count, e.g. ``parse_count("1k") == 1000``, ``parse_count("2000m") == 2``.

    Raises:
        ValueError: malformed (see :func:`parse_quantity`), negative (``"-1"``) or fractional
            (``"0.5"``, ``"1500m"``).
    """
    number = parse_quantity(value)
    if number < 0:
        raise ValueError(f"negative quantity: {value!r}")
    if number != number.to_integral_value():
        raise ValueError(f"fractional quantity: {value!r}")
    return int(number)

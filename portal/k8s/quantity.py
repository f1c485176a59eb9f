# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""Kubernetes quantities (``"8"``, ``"1k"``, ``"2000m"``) as whole device counts.

The one quantity parser of the portal (the sync, capacity and provisioning all read
``nvidia.com/*`` quantities through it).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?$"
)
_SUFFIX: dict[str, Decimal] = {
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse_int_quantity(value: str | int) -> int:
    """Parse a Kubernetes quantity that must be a whole, non-negative number of devices.

    Extended resources (``nvidia.com/*``) are integers in practice: the API server refuses
    fractional extended-resource requests on pods, and device plugins advertise whole counts.
    Accepts the full quantity grammar (``"8"``, ``"1k"``, ``"2e3"``, ``"2000m"``).

    Args:
        value: the raw quantity string (or an int, as JSON sometimes carries).

    Returns:
        The count, e.g. ``parse_int_quantity("1k") == 1000``.

    Raises:
        ValueError: for a malformed, negative or fractional quantity (``"0.5"``, ``"1500m"``).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number = Decimal(value)
    else:
        match = _QUANTITY.match(str(value).strip())
        if match is None:
            raise ValueError(f"not a quantity: {value!r}")
        try:
            number = Decimal(match["num"])
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
            raise ValueError(f"not a quantity: {value!r}") from exc
        if match["exp"]:
            number = number.scaleb(int(match["exp"][1:]))
        elif match["suffix"]:
            number *= _SUFFIX[match["suffix"]]
    if number < 0:
        raise ValueError(f"negative quantity: {value!r}")
    if number != number.to_integral_value():
        raise ValueError(f"fractional quantity: {value!r}")
    return int(number)

"""The one quantity parser (portal/k8s/quantity.py): apimachinery ``resource.Quantity`` grammar."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal import k8s
from portal.k8s.quantity import parse_count, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Decimal(8)),
        ("0", Decimal(0)),
        ("500m", Decimal("0.5")),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1E", Decimal(10**18)),  # exa, not an exponent
        ("1E3", Decimal(1000)),  # exponent
        ("2e3", Decimal(2000)),
        ("1e-3", Decimal("0.001")),
        ("1Ki", Decimal(1024)),
        ("16Gi", Decimal(16 * 2**30)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("5.", Decimal(5)),
        (".5", Decimal("0.5")),
        ("+3", Decimal(3)),
        ("-2", Decimal(-2)),
        (7, Decimal(7)),
    ],
)
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "bad", ["", " 8", "8 ", "abc", "1.5.2", "1KiB", "1ki", "1e", "1e1.5", ".", "--1", "1 k"]
)
def test_parse_quantity_refuses_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(bad)


def test_parse_quantity_refuses_bool() -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(True)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("0", 0),
        ("1k", 1000),
        ("2e3", 2000),
        ("2000m", 2),
        ("1Ki", 1024),
        ("2Ki", 2048),
        ("+3", 3),
        (4, 4),
    ],
)
def test_parse_count(text: str | int, value: int) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("0.5", "fractional"),
        ("1500m", "fractional"),
        ("1.5e0", "fractional"),
        ("-1", "negative"),
        ("x", "not a"),
    ],
)
def test_parse_count_refuses(bad: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_count(bad)


def test_the_adapter_uses_the_same_parser() -> None:
    spec = {
        "containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2000m", "nvidia.com/x": "0.5"}}}
        ]
    }
    assert k8s.pod_gpu_requests(spec) == ({"nvidia.com/gpu": 2}, {"nvidia.com/x": "0.5"})

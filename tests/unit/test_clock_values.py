"""Millisecond values read from drivers are normalised to int, or refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduler_core.db import optional_ms, to_ms
from scheduler_core.errors import InvalidStoredValueError


@pytest.mark.parametrize(
    "raw", [1764454512345, Decimal("1764454512345"), "1764454512345", Decimal("1764454512345.000")]
)
def test_accepts_whole_non_negative_values(raw: object) -> None:
    value = to_ms(raw, "lease_until")
    assert value == 1764454512345 and type(value) is int


@pytest.mark.parametrize("raw", [-1, Decimal("1.5"), "12.25", "abc", 2**53, None, True, float("nan"), [1]])
def test_refuses_negative_fractional_unsafe_or_foreign_values(raw: object) -> None:
    with pytest.raises(InvalidStoredValueError) as info:
        to_ms(raw, "lease_until")
    assert "lease_until" in str(info.value)


def test_optional_passes_none_through() -> None:
    assert optional_ms(None, "x") is None
    assert optional_ms("5", "x") == 5

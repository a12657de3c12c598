"""The condition language: safe, three-valued, and strict about names and syntax."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forensics.detect.expr import ExprError, parse


@pytest.mark.parametrize(
    ("text", "features", "want"),
    [
        ("grad_ratio >= 5", {"grad_ratio": 7.0}, True),
        ("grad_ratio >= 5", {"grad_ratio": 2.0}, False),
        ("grad_ratio >= 5", {}, None),
        ("beta2 is missing or beta2 <= 0.98", {}, True),
        ("beta2 is missing or beta2 <= 0.98", {"beta2": 0.999}, False),
        ("not (beta2 >= 0.99)", {}, None),
        ("beta2 is not missing", {"beta2": 0.9}, True),
        ('type != "recoverable"', {"type": "lingering"}, True),
        ('precision in ["fp16", "bf16"]', {"precision": "fp16"}, True),
        ("grad_lead <= max(3, log_interval)", {"grad_lead": 5.0, "log_interval": 10.0}, True),
        ("abs(pre_dip) * 2 + 1 > 1.5", {"pre_dip": -0.3}, True),
        ("-pre_dip >= 0.2", {"pre_dip": -0.3}, True),
        ("rise >= 1 and grad_ratio >= 5", {"rise": 2.0}, None),
        ("rise >= 1 or grad_ratio >= 5", {"rise": 2.0}, True),
        ("grad_ratio == inf", {"grad_ratio": math.inf}, True),
        ("precision == 1", {"precision": "fp16"}, False),
        ("true and not false", {}, True),
    ],
)
def test_evaluation(text: str, features: dict, want: bool | None) -> None:
    assert parse(text).evaluate(features) is want


@pytest.mark.parametrize(
    "text",
    [
        "",
        "grad_ratio >=",
        "(grad_ratio > 1",
        "grad_ratio > 1 extra",
        "__import__('os').system('true')",
        "grad_ratio; 1",
        "open('x')",
        "1 is missing",
        "and",
    ],
)
def test_bad_expressions_are_errors_not_code(text: str) -> None:
    with pytest.raises(ExprError):
        parse(text)


def test_names_are_collected_for_validation_and_evidence() -> None:
    expr = parse("grad_ratio >= 5 and (beta2 is missing or max(beta2, beta2_eff) < 0.99)")
    assert expr.names == {"grad_ratio", "beta2", "beta2_eff"}


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_expr_error(text: str) -> None:
    try:
        expr = parse(text)
    except ExprError:
        return
    assert expr.evaluate({}) in (True, False, None)

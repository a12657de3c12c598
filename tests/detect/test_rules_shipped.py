"""The shipped rules: valid, documented, proven by their fixtures; broken files name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from forensics.detect.features import FEATURES
from forensics.detect.rules import (
    DESCRIPTION_PARTS,
    KEYS,
    lint,
    load_rule,
    load_rules,
    run_fixtures,
    shipped_rules_dir,
)
from forensics.errors import RuleError

SHIPPED = load_rules()
CAUSES_WITH_RULES = {"rare_tokens", "stale_beta2", "lr_too_high", "fp16_overflow",
                     "data_corruption", "hardware_fault", "batch_driven"}  # fmt: skip


def test_every_cause_has_a_rule() -> None:
    assert {r.cause for r in SHIPPED} == CAUSES_WITH_RULES


@pytest.mark.parametrize(
    "result", run_fixtures(SHIPPED), ids=lambda r: f"{r.rule_id}-{r.kind}{r.index}"
)
def test_rule_fixture(result) -> None:  # type: ignore[no-untyped-def]
    assert result.passed, f"{result.rule_id} {result.kind}[{result.index}]: {result.features}"


@pytest.mark.parametrize("rule", SHIPPED, ids=lambda r: r.id)
def test_rule_file_shape(rule) -> None:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load(rule.path.read_text())
    assert list(raw) == list(KEYS)
    for part in DESCRIPTION_PARTS:
        assert part in rule.description
    assert rule.references and all(r.strip() for r in rule.references)
    assert rule.fixtures["trigger"] and rule.fixtures["no_trigger"]


def test_lint_validates_all_shipped_rules() -> None:
    result = lint()
    assert result.errors == [] and result.validated == result.total == len(SHIPPED)


def test_shipped_rules_are_found_beside_the_package() -> None:
    assert shipped_rules_dir() == Path(__file__).resolve().parents[2] / "rules"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rule_text(**changes: object) -> str:
    raw = yaml.safe_load((shipped_rules_dir() / "hardware-fault.yaml").read_text())
    raw.update(changes)
    return yaml.safe_dump(
        {k: raw[k] for k in KEYS if k in raw} | {k: v for k, v in raw.items() if k not in KEYS},
        sort_keys=False,
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cause": "gremlins"}, "cause"),
        ({"condition": "grad_ratio >>= 3"}, "condition"),
        ({"condition": "gremlin_count > 3"}, "condition"),
        ({"status": "final"}, "status"),
        ({"confidence": 1.5}, "confidence"),
        (
            {"confidence": {"base": 0.5, "adjust": [{"when": "rise >", "add": 0.1}]}},
            "confidence.adjust[0].when",
        ),
        ({"recovery": "reboot"}, "recovery"),
        ({"description": "What it detects: x. Why it matters: y."}, "description"),
        ({"references": []}, "references"),
        ({"fixtures": {"trigger": [{"nope": 1}], "no_trigger": [{}]}}, "fixtures.trigger[0]"),
        ({"extra_key": 1}, "extra_key"),
    ],
)
def test_broken_rule_names_file_and_field(tmp_path: Path, changes: dict, field: str) -> None:
    path = _write(tmp_path, "broken.yaml", _rule_text(**changes))
    with pytest.raises(RuleError) as err:
        load_rule(path)
    assert str(path) in str(err.value) and f"field '{field}'" in str(err.value)


def test_missing_key_and_bad_yaml(tmp_path: Path) -> None:
    raw = yaml.safe_load(_rule_text())
    del raw["level"]
    path = _write(tmp_path, "nolevel.yaml", yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(RuleError, match="field 'level'"):
        load_rule(path)
    with pytest.raises(RuleError, match=r"field '\(file\)'"):
        load_rule(_write(tmp_path, "bad.yaml", "id: [unclosed"))


def test_keys_out_of_order(tmp_path: Path) -> None:
    raw = yaml.safe_load(_rule_text())
    order = ["title", "id", *[k for k in KEYS if k not in ("id", "title")]]
    path = _write(
        tmp_path, "order.yaml", yaml.safe_dump({k: raw[k] for k in order}, sort_keys=False)
    )
    with pytest.raises(RuleError, match="out of order"):
        load_rule(path)


def test_a_user_rule_dir_adds_and_overrides(tmp_path: Path) -> None:
    _write(tmp_path, "mine.yaml", _rule_text(id="my-rule"))
    _write(tmp_path, "hw.yaml", _rule_text(title="Replaced"))
    rules = {r.id: r for r in load_rules([tmp_path])}
    assert "my-rule" in rules and rules["hardware-fault"].title == "Replaced"
    assert len(rules) == len(SHIPPED) + 1


def test_lint_counts_broken_files(tmp_path: Path) -> None:
    _write(tmp_path, "broken.yaml", _rule_text(cause="gremlins"))
    result = lint([tmp_path])
    assert result.total == len(SHIPPED) + 1 and result.validated == len(SHIPPED)
    assert "broken.yaml" in str(result.errors[0])


def test_every_feature_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "detection.md").read_text()
    missing = [name for name, text in FEATURES.items() if f"| `{name}` | {text} |" not in doc]
    assert not missing, f"docs/detection.md lacks or misstates {missing}"

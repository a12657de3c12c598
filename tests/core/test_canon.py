"""Canonical metric names: spellings map onto one vocabulary; the table is user-extensible."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.canon import alias_table
from forensics.errors import InputError


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("lm loss", "loss"),
        ("train/loss", "loss"),
        ("train_loss", "loss"),
        ("trl", "loss"),
        ("grad norm", "grad_norm"),
        ("gradient_norm", "grad_norm"),
        ("learning rate", "lr"),
        ("learning_rate", "lr"),
        ("loss scale", "loss_scale"),
        ("number of skipped iterations", "skipped_iters"),
        ("lm loss value", "val_loss"),
        ("tel", "val_loss"),
        ("eval_loss", "val_loss"),
        ("mtp_1 loss", "mtp_loss/1"),
        ("act_norm/3", "act_norm/3"),
        ("layer_2.max_attn_logit", "max_attn_logit/2"),
        ("Some Custom-Metric", "some_custom_metric"),
    ],
)
def test_shipped_aliases(raw: str, canonical: str) -> None:
    assert alias_table().canonical(raw) == canonical


def test_validation_loss_never_maps_to_training_loss() -> None:
    table = alias_table()
    for raw in ["val_loss", "eval_loss", "validation/loss", "lm loss value", "tel", "val/loss"]:
        assert table.canonical(raw) != "loss", raw


def test_user_table_extends_and_wins(tmp_path: Path) -> None:
    user = tmp_path / "aliases.yaml"
    user.write_text("canonical:\n  loss:\n    aliases: [my_weird_objective]\n")
    table = alias_table(str(user))
    assert table.canonical("my_weird_objective") == "loss"
    assert table.canonical("lm loss") == "loss"


def test_broken_user_table_names_the_file_and_field(tmp_path: Path) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text("canonical:\n  loss: [oops]\n")
    with pytest.raises(InputError, match=r"bad\.yaml.*canonical\.loss"):
        alias_table(str(user))

"""The incident figure's alt text names the rows the figure draws, no others.

DeepSpeed prints the optimizer's LR once, at step 0, before its scheduler steps. The alt
text of a spike at step 120 said "loss and LR" (the run has an `lr` column) over a figure
of its window, steps 90-160, that draws the loss alone: the LR is not logged there."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

# quoted from a real DeepSpeed log (hwang2006/large-scale-lm-tutorials, ZeRO-1)
DS_STEP0 = (
    "[2024-09-15 00:13:21,397] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, "
    "lr=[3e-05], mom=[(0.9, 0.999)]\n"
)
DS_CONFIG = {
    "train_batch_size": 16,
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 300,
                  "warmup_min_lr": 0, "warmup_max_lr": 3e-05, "warmup_num_steps": 30}},
    "fp16": {"enabled": True},
}  # fmt: skip


def _run(folder: Path, lr_every: int | None) -> None:
    """300 steps, a spike at 120; the LR printed once (None) or every `lr_every` steps."""
    folder.mkdir(parents=True)
    lines = [DS_STEP0]
    for s in range(300):
        v = (2.0 + 3.5 * (1 + s / 10) ** -0.7) * (1.9 if s == 120 else 1.0)
        v *= 1 + 0.01 * ((s * 7919) % 13 - 6) / 6
        lines.append(f"step:{s}, loss:{v:.6f}\n")
        if lr_every and s % lr_every == 0 and s:
            lines.append(f"[Rank 0] step={s}, skipped=0, lr=[{3e-5 * min(1, s / 30):.6g}]\n")
    (folder / "train.log").write_text("".join(lines))
    (folder / "ds_config.json").write_text(json.dumps(DS_CONFIG))


def _alt(out: Path) -> str:
    page = (out / "postmortems" / "spike-01.md").read_text()
    # the PNG's alt text, or (no browser for PNG export here) the HTML link's words
    (alt,) = re.findall(r"\[(Spike #1: [^\]]*?)(?: \(interactive figure, HTML\))?\]"
                        r"\(\.\./figures/spike-01-metrics\.(?:png|html)\)", page)  # fmt: skip
    return alt


def test_an_lr_printed_once_is_not_in_the_figure_or_its_alt_text(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _run(tmp_path / "ds", lr_every=None)
    out, _ = analyzed(tmp_path / "ds", min_severity="minor")
    assert _alt(out) == "Spike #1: loss"
    # no gradient norm logged: "no near-miss" says what it could not have seen
    assert (
        "No near-miss was recorded (a gradient spike the loss did not follow needs the "
        "gradient norm, which this run does not log)." in (out / "README.md").read_text()
    )


def test_an_lr_logged_through_the_window_is_named(
    tmp_path: Path, analyzed: Callable[..., tuple[Path, Path]]
) -> None:
    _run(tmp_path / "ds", lr_every=10)
    out, _ = analyzed(tmp_path / "ds", min_severity="minor")
    assert _alt(out) == "Spike #1: loss and LR"

"""Three mechanisms a log shows without the metrics our simulator logs.

- A burst of corrupt values (NaN, or a loss no batch of text can score) at a few steps,
  with every loss around and between them on trend: an applied NaN or absurd update would
  have carried into every later loss, so the values were corrupted, not the model
  (hardware-fault, feature `transient_bad`).
- An fp16 run whose loss scale is not logged still shows its overflows: the Trainer logs
  an overflowed step's gradient norm as inf while the loss stays finite. Such steps just
  before a spike name fp16 overflow (`overflows`, `overflow_lead`); the same log from a
  bf16 run does not.
- A loss that steps up to the random-token level, holds a flat top for several steps and
  steps back is a shard of bad data (data-corruption-shard, `plateau_points`), and so is one
  left by a step while the damage the shard did decays after (`flat_top`); one batch's
  spike, or a damaged model's top, that decays is not.

Logs are written by torch's SummaryWriter (`train/loss`, `train/grad_norm`, `train/lr`) with
the run's config beside them as `args.json`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import stored_incidents

pytest.importorskip("torch.utils.tensorboard")

STEPS, VOCAB = 1500, 50257
Edit = Callable[[int, float, float], tuple[float, float]]


def _write(folder: Path, seed: int, edit: Edit, precision: str | None = "bf16") -> Path:
    """A pre-training run past its start-up, every step logged; `edit(step, loss, grad)`
    returns the values to log at that step. `precision` None: the config does not say."""
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True)
    args: dict = {"lr": 3e-4, "warmup_steps": 100, "adam_beta2": 0.95}
    if precision:
        args[precision] = True
    (folder / "args.json").write_text(json.dumps(args))
    rng = np.random.default_rng(seed)
    with SummaryWriter(str(folder)) as w:
        for step in range(1, STEPS + 1):
            loss = 2.5 + 6.0 * (step / 50 + 1) ** -0.6  # a power law from ~8.5 down to 3.3
            loss *= math.exp(rng.normal(0, 0.012))
            grad = 0.6 * math.exp(rng.normal(0, 0.1))
            loss, grad = edit(step, loss, grad)
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/grad_norm", grad, step)
            w.add_scalar("train/lr", 3e-4 * min(1.0, step / 100), step)
    return folder


NAN = float("nan")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_burst_of_nan_values_that_did_not_carry_is_a_hardware_fault(
    tmp_path: Path, seed: int
) -> None:
    bad = {900, 903, 911}
    found = stored_incidents(
        _write(tmp_path / "run", seed, lambda s, x, g: (NAN, NAN) if s in bad else (x, g)),
        tmp_path,
    )
    assert len(found) == 1
    assert (found[0]["type"], found[0]["cause"]) == ("recoverable", "hardware_fault")


def test_nan_that_carries_on_is_not_a_transient_fault(tmp_path: Path) -> None:
    found = stored_incidents(
        _write(tmp_path / "run", 1, lambda s, x, g: (NAN, NAN) if s >= 900 else (x, g)),
        tmp_path,
    )
    assert [(i["type"], i["cause"] == "hardware_fault") for i in found] == [("divergent", False)]


def test_a_loss_far_beyond_any_batch_is_a_hardware_fault(tmp_path: Path) -> None:
    """A loss and gradient 200x their level at two steps (the loss ~80x the initial one: no
    text scores that), the points around and between them on trend. (A loss alone that
    high, with the gradient unmoved, is a near-miss: the value, not the update, was bad.)"""

    def corrupt(s: int, loss: float, grad: float) -> tuple[float, float]:
        return (loss * 200, grad * 200) if s in (900, 906) else (loss, grad)

    found = stored_incidents(_write(tmp_path / "run", 4, corrupt), tmp_path)
    # two one-point excursions 6 steps apart: one incident each, both named
    assert found and {i["peak_step"] for i in found} <= {900, 906}
    assert {i["cause"] for i in found} == {"hardware_fault"}


def _overflow_then_spike(s: int, loss: float, grad: float) -> tuple[float, float]:
    if s in (880, 884, 889, 893, 897):
        return loss, float("inf")  # overflowed steps: skipped, the loss unchanged
    if s >= 900:
        loss *= 1 + 0.6 * math.exp(-(s - 900) / 25)
    return loss, grad


@pytest.mark.parametrize("seed", [1, 2])
def test_inf_grad_norms_before_a_spike_in_an_fp16_run_are_overflows(
    tmp_path: Path, seed: int
) -> None:
    found = stored_incidents(_write(tmp_path / "run", seed, _overflow_then_spike, "fp16"), tmp_path)
    assert [(abs(i["onset_step"] - 900) <= 5, i["cause"]) for i in found] == [
        (True, "fp16_overflow")
    ]


def test_skipped_steps_before_a_spike_are_no_batchs_gradient(tmp_path: Path) -> None:
    """The config does not state the precision: the inf gradient norms (the loss finite) are
    skipped steps, not the finite gradient jump of a rare-token batch; the cause stays open
    (fp16 overflow is not claimed either: the run is not known to be fp16)."""
    found = stored_incidents(_write(tmp_path / "run", 1, _overflow_then_spike, None), tmp_path)
    assert [(abs(i["onset_step"] - 900) <= 5, i["cause"]) for i in found] == [(True, "unknown")]


def test_the_same_log_from_a_bf16_run_is_not_an_overflow(tmp_path: Path) -> None:
    found = stored_incidents(_write(tmp_path / "run", 1, _overflow_then_spike, "bf16"), tmp_path)
    assert len(found) == 1 and found[0]["cause"] != "fp16_overflow"


def _shard(s: int, loss: float, grad: float) -> tuple[float, float]:
    if 900 <= s < 908:  # eight batches of random tokens: the loss of text it cannot predict
        return math.log(VOCAB) * math.exp(np.random.default_rng(s).normal(0, 0.01)), grad * 4
    return loss, grad


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_flat_top_at_the_random_token_level_is_a_shard(tmp_path: Path, seed: int) -> None:
    found = stored_incidents(_write(tmp_path / "run", seed, _shard), tmp_path)
    assert [(i["onset_step"], i["cause"]) for i in found] == [(900, "data_corruption")]


def _damaging_shard(s: int, loss: float, grad: float) -> tuple[float, float]:
    """Twenty batches of random tokens; the update on them leaves the model +50% worse,
    which heals over ~40 steps: the top is left by a step, not back to the trend."""
    if 900 <= s < 920:
        return math.log(VOCAB) * math.exp(np.random.default_rng(s).normal(0, 0.01)), grad * 4
    if s >= 920:
        loss *= 1 + 0.5 * math.exp(-(s - 920) / 40)
    return loss, grad


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_shard_that_damaged_the_model_is_still_a_shard(tmp_path: Path, seed: int) -> None:
    found = stored_incidents(_write(tmp_path / "run", seed, _damaging_shard), tmp_path)
    assert [(i["onset_step"], i["cause"]) for i in found] == [(900, "data_corruption")]


def test_a_top_that_decays_is_no_shard(tmp_path: Path) -> None:
    """A damaged model's own top: up at once to the random-token level, held for a few
    steps and decaying by a few % of its rise per step, the gradient up with it."""

    def damaged(s: int, loss: float, grad: float) -> tuple[float, float]:
        if s >= 900:
            top = math.log(VOCAB) / loss
            loss *= top ** (1.0 if s < 904 else math.exp(-(s - 904) / 30))
            grad *= 1 + 3 * math.exp(-(s - 900) / 30)
        return loss, grad

    found = stored_incidents(_write(tmp_path / "run", 1, damaged), tmp_path)
    assert len(found) == 1 and found[0]["cause"] != "data_corruption"


def test_one_batch_that_decays_is_not_a_shard(tmp_path: Path) -> None:
    """A rare-token batch: the gradient jumps at the step, the loss decays over tens."""

    def rare(s: int, loss: float, grad: float) -> tuple[float, float]:
        if s >= 900:
            loss *= 1 + 1.2 * math.exp(-(s - 900) / 12)
        return loss, grad * 15 if s == 900 else grad

    found = stored_incidents(_write(tmp_path / "run", 1, rare), tmp_path)
    assert [(i["onset_step"], i["cause"]) for i in found] == [(900, "rare_tokens")]

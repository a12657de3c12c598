"""Step counters that start again at every epoch, the epoch printed beside them.

A hand-written loop prints `enumerate(loader)`'s index with the epoch; read as printed,
every epoch lands on the first one's steps and the dedupe keeps the last epoch alone,
calling the others a resumed attempt (what the tool did before: 2 of 3 epochs in
`conflicts`). The step is counted over epochs where, and only where, the counter goes back
exactly when the printed epoch goes up.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from issue_log_helpers import stored as _stored


def _loss(g: int) -> float:
    return round(3.0 * math.exp(-g / 800) + 1.0 + 0.01 * math.sin(g), 4)


def _loop(first_epoch: int, epochs: int, counts: range, line: str) -> str:
    out = []
    for e in range(first_epoch, first_epoch + epochs):
        for i in counts:
            g = (e - first_epoch) * 500 + i
            out.append(line.format(e=e, i=i, loss=_loss(g)))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("first", "counts", "line", "length"),
    [
        (1, range(10, 510, 10), "Epoch: {e}, Iter: {i}, loss: {loss}", 500),  # 1-based, to N
        (0, range(0, 500, 10), "epoch {e} | step {i} | loss {loss} | lr 0.001", 500),  # 0..N-1
    ],
)
def test_a_per_epoch_counter_is_counted_over_epochs(
    tmp_path: Path, first: int, counts: range, line: str, length: int
) -> None:
    _, m, w = _stored(tmp_path, _loop(first, 3, counts, line))
    assert len(m["loss"]) == 3 * len(counts)  # every epoch kept, none in conflicts
    expected = {e * length + i: _loss(e * length + i) for e in range(3) for i in counts}
    assert m["loss"] == expected
    assert any("starts again at every epoch" in x and f"{length} per epoch" in x for x in w)
    assert not any("restart or resume" in x for x in w)


def test_a_log_starting_at_a_later_epoch_is_placed_after_the_epochs_before(
    tmp_path: Path,
) -> None:
    # resumed at epoch 3 of a 1-based loop: epochs 1 and 2 (1000 steps) came before
    _, m, _ = _stored(
        tmp_path, _loop(3, 2, range(10, 510, 10), "Epoch: {e}, Iter: {i}, loss: {loss}")
    )
    assert min(m["loss"]) == 2 * 500 + 10 and max(m["loss"]) == 3 * 500 + 500


def test_a_global_step_printed_with_its_epoch_is_left_as_printed(tmp_path: Path) -> None:
    text = "".join(f"epoch {g // 100} | step {g} | loss {_loss(g)}\n" for g in range(10, 400, 10))
    _, m, w = _stored(tmp_path, text)
    assert set(m["loss"]) == set(range(10, 400, 10))
    assert not any("starts again" in x for x in w)


def test_a_counter_going_back_inside_an_epoch_is_a_restart_not_an_epoch(tmp_path: Path) -> None:
    # a resume from a checkpoint of step 200 within epoch 1: the restart dedupe's case
    lines = [f"Epoch: 1, Iter: {i}, loss: {_loss(i)}" for i in range(10, 310, 10)]
    lines += [f"Epoch: 1, Iter: {i}, loss: {_loss(i) + 0.5}" for i in range(200, 400, 10)]
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert max(m["loss"]) == 390 and m["loss"][250] == round(_loss(250) + 0.5, 4)
    assert not any("starts again" in x for x in w)
    assert any("restart or resume" in x for x in w)


# ----- Time-LLM (KimMeen/Time-LLM#14) ---------------------------------------------------------
# A tqdm bar without a total (`599it [..]`) redrawn with `\r`, and every 100 iterations
# `\titers: i, epoch: e | loss:` after it; `iters` counts within the epoch (2000 a epoch).
_TIME_LLM_EPOCH = (
    "{bars}\r{n}it [06:51,  1.46it/s]\titers: {n}, epoch: {e} | loss: {loss}\n"
    "\tspeed: 0.6852s/iter; left time: 13016.4512s\n"
)


def _time_llm(losses: dict[tuple[int, int], float | str]) -> str:
    out = []
    for e in (1, 2, 3):
        for n in range(100, 2100, 100):
            bars = "\r".join(f"{k}it [00:{k % 60:02d},  1.46it/s]" for k in (n - 99, n - 50))
            loss = losses.get((e, n), round(0.9 - 0.0001 * (e * 2000 + n) / 10, 7))
            out.append(_TIME_LLM_EPOCH.format(bars=bars, n=n, e=e, loss=loss))
        out.append(
            f"Epoch: {e} cost time: 1374.2\n"
            f"Epoch: {e} | Train Loss: 0.45 Vali Loss: 0.6{e} Test Loss: 0.7{e} MAE Loss: 0.5\n"
        )
    return "".join(out)


def test_time_llm_iterations_are_counted_over_epochs(tmp_path: Path) -> None:
    # before: `iters` restarted every epoch, so epoch 3's NaN at iteration 800 was stored at
    # step 800 and epochs 1-2 went to `conflicts` as a resumed attempt; the issue's spike at
    # epoch 2 iteration 1200 is update 2000 + 1200
    _, m, w = _stored(tmp_path, _time_llm({(2, 1200): 1.9312, (3, 800): "nan"}))
    assert len(m["loss"]) == 60
    assert m["loss"][3200] == 1.9312 and math.isnan(m["loss"][4800])
    # the epoch summaries follow their epoch's last bar line: one per epoch, at its end
    assert m["epoch/vali_loss"] == {2000: 0.61, 4000: 0.62, 6000: 0.63}
    assert not any("restart or resume" in x for x in w)


# ----- llama-recipes / llama-cookbook finetuning (meta-llama/llama-cookbook#300) ---------------
# its tqdm description: `Training Epoch: {epoch+1}/{num_epochs}, step {step}/{len(loader)}
# completed (loss: {loss})`, the bar after it; at 100% the bar is one blank narrower
_LLAMA_RECIPES = (
    "Training Epoch: {e}/150, step {i}/8 completed (loss: {loss}): {pct:3d}%|{bar}| {n}/8 "
    "[00:0{n}<00:03,  3.78s/it]"
)


def test_llama_recipes_steps_count_over_epochs_with_the_printed_length(tmp_path: Path) -> None:
    # before: `step i/8` restarted every epoch and epochs 1-2 went to `conflicts` as a
    # resumed attempt; the epoch key is `Training Epoch`, and the last step of an epoch is
    # a kind of line of its own (`100%` one blank narrower)
    lines = []
    for e in (1, 2, 3):
        for i in range(8):
            loss = 6.5 if (e, i) == (2, 5) else round(1.4 - 0.03 * ((e - 1) * 8 + i), 4)
            n = i + 1
            lines.append(
                _LLAMA_RECIPES.format(e=e, i=i, loss=loss, pct=100 * n // 8, bar="#" * n, n=n)
            )
    _, m, w = _stored(tmp_path, "\n".join(lines) + "\n")
    assert sorted(m["loss"]) == list(range(24))  # 8 a epoch, from the printed `/8`
    assert m["loss"][8 + 5] == 6.5
    assert any("8 per epoch" in x for x in w) and not any("restart or resume" in x for x in w)

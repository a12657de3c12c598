"""README.md of a simulated run: what was injected, what happened, with the run's own numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from forensics.sim.scenarios import get_scenario
from forensics.sim.trainer import TrainConfig

if TYPE_CHECKING:
    from forensics.sim.simulate import SimResult

MECHANISM = {
    "clean": "Nothing was injected. Detectors must report no incident here (the 'goodlog').",
    "rare_tokens": (
        "The injected batch consists of token ids from the rare band, which the training data "
        "essentially never contains, so the model gives them near-zero probability: that batch's "
        "loss and gradient norm jump. Clipping and Adam's normalisation bound the update, so the "
        "next ordinary batch is back on trend."
    ),
    "stale_beta2": (
        "With beta2 = 0.999 Adam's second moment remembers ~1000 steps. The rare-band rows of the "
        "embedding had (almost) no gradient before, so their second moment is ~0; the burst's "
        "gradients there are divided by a stale, tiny sqrt(v) and the updates come out several "
        "times larger than with beta2 = 0.95 (update_norm jumps). The overshoot leaves the loss on "
        "ordinary batches above trend after the burst, and it comes down slowly."
    ),
    "lr_too_high": (
        "The peak learning rate is far too high. While the LR ramps up, parameter and activation "
        "norms and the grad norm drift up; from the end of warmup on the loss spikes again and "
        "again."
    ),
    "fp16_overflow": (
        "The run computes in fp16 with a dynamic loss scaler. For a few steps the token embeddings "
        "are multiplied by a large factor (manifest field `input_scale`), the activations exceed "
        "65504, the forward pass yields inf/NaN, and the scaler halves the loss scale and skips "
        "each of those steps. The weights are untouched, so training goes on at a lower scale."
    ),
    "data_corruption": (
        "A run of degenerate batches (nothing but the end-of-sentence token) is trivially "
        "predictable: their loss falls far BELOW trend as the model learns to repeat the token. "
        "When real text returns, the model keeps predicting that token and the loss spikes, then "
        "recovers."
    ),
    "hardware_fault": (
        "One bit of one gradient element was flipped after the backward pass, as a faulty GPU "
        "would. Flipping the top exponent bit turns a small value into ~1e35, so the global grad "
        "norm is Inf at exactly that step. The trainer skips non-finite steps (Megatron's "
        "found_inf), so the weights are untouched and the loss carries on. Replaying the step "
        "from the checkpoint gives a finite grad norm: the fault does not reproduce."
    ),
}


def _f(x: Any, digits: int = 3) -> str:
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else f"{x:.{digits}g}"
    return str(x)


def _type_line(exp: dict[str, Any], twin: str | None) -> str:
    """Why the expected type is what it is: detection's rule against the clean twin."""
    t = exp.get("typing") or {}
    tol = t.get("tolerance")
    within = f"within {tol:.1%} of" if isinstance(tol, float) else "back to"
    head = f"  - type {exp['type']}, by detection's recovery-window rule against the clean twin"
    head += f" (`../{twin}`)" if twin else ""
    if t.get("recovery_step") is not None:
        return f"{head}: {within} the twin's loss again from step {t['recovery_step']}"
    excess = t.get("settle_excess")
    side = "above" if isinstance(excess, float) and excess >= 0 else "below"
    settled = f"; it settled {abs(excess):.1%} {side} it" if isinstance(excess, float) else ""
    notes = "".join(f"; {n}" for n in t.get("notes", []))
    window = t.get("window_steps")
    span = f"{window:g} steps" if isinstance(window, float | int) else "the window"
    return f"{head}: not {within} the twin's loss within {span} of the last peak{settled}{notes}"


def _incident_lines(exp: dict[str, Any], num: dict[str, Any], twin: str | None) -> list[str]:
    lines = [
        f"- **{exp['cause']}** ({exp['type']}): onset step {exp['onset_step']}, "
        f"peak step {exp['peak_step']}",
        _type_line(exp, twin),
        f"  - loss: trend before {_f(num['trend_before'])}, at onset {_f(num['loss_at_onset'])}, "
        f"at peak {_f(num['peak_loss'])}, lowest in the incident "
        f"{_f(num['min_loss_in_incident'])}, median 20-50 steps after the incident "
        f"{_f(num['loss_after'])}",
        f"  - grad norm: {_f(num['grad_norm_before'])} before, peak {_f(num['grad_norm_peak'])}"
        + (
            f"; non-finite at steps {num['nonfinite_grad_norm_steps']}"
            if num["nonfinite_grad_norm_steps"]
            else ""
        ),
        f"  - update norm: {_f(num['update_norm_before'])} before, peak "
        f"{_f(num['update_norm_peak'])}",
    ]
    if num["skipped_steps"]:
        lines.append(f"  - skipped steps: {num['skipped_steps'][:20]}")
    if "loss_scale_min" in num:
        lines.append(
            f"  - loss scale: {_f(num['loss_scale_before'])} at onset, lowest "
            f"{_f(num['loss_scale_min'])}"
        )
    return lines


def _timing(result: SimResult) -> str:
    if math.isnan(result.seconds):
        return ""
    return f"; {result.seconds:.0f} s of training on {result.device}"


def write_readme(result: SimResult, cfg: TrainConfig) -> None:
    scen = get_scenario(result.scenario)
    truth = result.truth
    lines = [
        f"# {result.scenario}",
        "",
        f"{scen.summary[0].upper()}{scen.summary[1:]}.",
        "",
        f"Generated by `forensics simulate {result.scenario}` (preset `{cfg.preset}`, "
        f"{result.n_params:,} parameters, {cfg.total_steps} steps of {cfg.batch_size}x"
        f"{cfg.seq_len} tokens, peak LR {cfg.peak_lr:g}, beta2 {cfg.beta2}, {cfg.precision}, "
        f"seed {cfg.seed}){_timing(result)}.",
        "",
        "## What was injected",
        "",
    ]
    lines += [f"- step {i['step']}: {i['what']}" for i in truth["injected"]] or ["- nothing"]
    lines += ["", "## What happened", "", MECHANISM[result.scenario], ""]
    for exp, num in zip(truth["expected"], result.incidents, strict=True):
        lines += _incident_lines(exp, num, truth.get("twin"))
    lines += result.notes
    lines += [
        f"- final loss (mean of the last 50 steps): {_f(result.final_loss)}",
        "",
        "## Files",
        "",
        "`metrics.jsonl` (one row per step), `batches.jsonl` (batch manifest), `config.json`, "
        "`truth.json` (ground truth), `data/` (llm.c token shards, unigram counts), "
        f"`checkpoints/` (steps {', '.join(str(s) for s in cfg.ckpt_steps)}), `loss.png`. "
        "docs/simulate.md describes the layouts.",
        "",
    ]
    (result.run_dir / "README.md").write_text("\n".join(lines))

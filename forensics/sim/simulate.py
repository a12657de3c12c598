"""`forensics simulate`: generate a run folder with a known fault and its ground truth.

    result = simulate("rare_tokens", Path("out/rare"))         # tiny preset, 1600 steps
    results = simulate_all(Path("sample_logs"))                  # one folder per scenario

A run folder holds config.json, metrics.jsonl, batches.jsonl, data/, checkpoints/,
truth.json, loss.png and README.md (docs/simulate.md describes each).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forensics.errors import SimulationError
from forensics.sim.counterfactual import replay_notes
from forensics.sim.data import prepare_data
from forensics.sim.model import GPT, PRESETS, preset
from forensics.sim.readme import write_readme
from forensics.sim.report import PLOT_HTML, PLOT_PNG, drift_lines, incident_numbers, plot_run
from forensics.sim.run import CONFIG, METRICS, read_metrics, train_run
from forensics.sim.scenarios import SCENARIOS, get_scenario
from forensics.sim.trainer import TrainConfig
from forensics.sim.twin import damage, expected_shape, fixed_loss, twin_loss, typing_record

TRUTH, README = "truth.json", "README.md"
Progress = Callable[[str, int, int], None]  # (scenario, step, total_steps)


@dataclass
class SimResult:
    scenario: str
    run_dir: Path
    truth: dict[str, Any]
    incidents: list[dict[str, Any]]  # incident_numbers() of each expected incident
    final_loss: float
    seconds: float
    n_params: int
    device: str
    notes: list[str]  # README lines from replays that show the cause


def base_config(preset_name: str, steps: int | None, device: str, seed: int) -> TrainConfig:
    """The healthy run every scenario starts from."""
    if preset_name not in PRESETS:
        raise SimulationError(f"unknown preset {preset_name!r}; choose one of {', '.join(PRESETS)}")
    if preset_name == "tiny":
        total = steps or 1600
        cfg = TrainConfig(model=preset("tiny"), preset="tiny", total_steps=total)
    else:
        total = steps or 3000
        cfg = TrainConfig(
            model=preset("small"), preset="small", total_steps=total, batch_size=16,
            seq_len=512, peak_lr=3e-3, min_lr=3e-4, data_tokens=1 << 22, log_layers_every=50,
            threads=0,
        )  # fmt: skip
    if total < 100:
        raise SimulationError(f"--steps {total} is too short; use at least 100")
    return replace(cfg, warmup_steps=max(10, total // 20), device=device, seed=seed)


def _reset(run_dir: Path) -> None:
    """Remove what an earlier simulation wrote here, so no stale checkpoint survives."""
    for name in (CONFIG, METRICS, "batches.jsonl", TRUTH, README, PLOT_PNG, PLOT_HTML):
        (run_dir / name).unlink(missing_ok=True)
    for sub in ("data", "checkpoints"):
        if (run_dir / sub).is_dir():
            shutil.rmtree(run_dir / sub)


def simulate(
    scenario: str,
    out: Path,
    *,
    steps: int | None = None,
    preset_name: str = "tiny",
    device: str = "auto",
    seed: int = 1337,
    at: int | None = None,
    strength: float | None = None,
    progress: Progress | None = None,
    plot: bool = True,
    ckpt_every: int | None = None,
) -> SimResult:
    """Train one run with `scenario` injected into the folder `out`; return its summary.

    plot=False skips loss.png (starting Chromium costs seconds; tests turn it off).
    ckpt_every=N also checkpoints every N steps, as real runs do, besides the scenario's
    checkpoint before the injection and the last step: replay then starts from the latest
    one before wherever detection puts the onset, not only from `at` - 20. The bundled
    sample runs keep the two checkpoints (their folder must stay small).
    """
    scen = get_scenario(scenario)
    base = base_config(preset_name, steps, device, seed)
    at = scen.default_at(base) if at is None else at
    strength = scen.default_strength if strength is None else strength
    scen.check(base, at, strength)
    cfg = scen.configure(base, at, strength)
    if ckpt_every:
        if ckpt_every < 1:
            raise SimulationError(f"ckpt_every must be >= 1 step, not {ckpt_every}")
        grid = range(ckpt_every, cfg.total_steps, ckpt_every)
        cfg = replace(cfg, ckpt_steps=sorted(set(cfg.ckpt_steps) | set(grid)))
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    _reset(run_dir)
    lang = prepare_data(run_dir, cfg.model.vocab_size, cfg.data_tokens, cfg.data_seed)
    plan = scen.plan(run_dir, cfg, lang, at, strength)
    t0 = time.time()
    tick = (lambda s: progress(scenario, s, cfg.total_steps)) if progress else None
    state, rows = train_run(cfg, run_dir, plan.overrides, plan.faults, tick)
    seconds = time.time() - t0
    run = Trained(scenario, run_dir, base, cfg, at, strength, plan.injected, rows)
    return finish(run, seconds, state.model.num_params(), str(state.device), plot)


@dataclass
class Trained:
    """A trained run and what was injected into it: all `finish` needs."""

    scenario: str
    run_dir: Path
    base: TrainConfig  # the healthy run the scenario started from
    cfg: TrainConfig  # the run as trained
    at: int
    strength: float
    injected: list[dict[str, Any]]
    rows: list[dict[str, Any]]


def expected_incidents(
    run: Trained,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str | None]:
    """truth.json's "expected": cause, onset and peak from the scenario, the type measured
    against the clean twin by detection's rule (forensics/sim/twin.py); the twin's loss and
    where it came from."""
    scen = get_scenario(run.scenario)
    found = scen.expected(run.rows, run.at, run.strength)
    if not found:
        return [], None, None
    twin, source = twin_loss(scen.twin_config(run.base, run.cfg), run.run_dir)
    attribution = attribute(run)  # one fixed re-run for the run, not per incident
    out = []
    for e in found:
        last = max(int(e["peak_step"]), scen.injection_end(run.at, run.strength))
        shape = expected_shape(run.rows, twin, int(e["onset_step"]), last)
        item = {
            "cause": e["cause"], "type": shape.type, "onset_step": e["onset_step"],
            "peak_step": e["peak_step"], "typing": typing_record(shape),
        }  # fmt: skip
        if attribution is not None:
            item["cause"] = attribution["root_cause"]
            item["attribution"] = attribution
        out.append(item)
    return out, twin, source


def attribute(run: Trained) -> dict[str, Any] | None:
    """For a trigger + amplifier fault: the root cause is the amplifier when fixing it (from
    the checkpoint before the injection, as an engineer would restart the run) removes >= half
    of the incident's damage, else the trigger (the batches do the damage by themselves).

    The damage is measured against the same run without the trigger (`twin_loss` of the run's
    own config: beta2 = 0.999, no burst), step by step on the same batches: the loss the
    burst added. Not against the typing twin (beta2 = 0.95 from step 0): the stale run sits
    above that one before any burst, an offset that no fix from a checkpoint can remove,
    which capped every share below 1 - offset / damage."""
    scen = get_scenario(run.scenario)
    fix = scen.fix(run.base)
    if fix is None or scen.trigger is None or scen.cause is None:
        return None
    lo, hi = scen.damage_window(run.at, run.strength)
    ckpt = scen.ckpt_before(run.at)
    untriggered, source = twin_loss(run.cfg, run.run_dir)
    fixed = fixed_loss(run.rows, run.run_dir, ckpt, hi, fix)
    hurt, left = damage(run.rows, untriggered, lo, hi), damage(fixed, untriggered, lo, hi)
    removed = 1.0 - left / hurt if hurt > 0 else 0.0
    return {
        "rule": f"restarted from step {ckpt} with {fix}, the same batches: the amplifier is "
        "the root cause when that removes >= 50% of the damage, the largest loss above the "
        "same run without the trigger (same batch, same step) on the ordinary batches of "
        "the window",
        "trigger": scen.trigger, "amplifier": scen.cause, "fix": fix, "checkpoint": ckpt,
        "without_trigger": source, "window": [lo, hi], "damage": round(hurt, 4),
        "damage_fixed": round(left, 4), "share_removed": round(removed, 4),
        "root_cause": scen.cause if removed >= 0.5 else scen.trigger,
    }  # fmt: skip


def finish(run: Trained, seconds: float, n_params: int, device: str, plot: bool) -> SimResult:
    """Write truth.json, loss.png and README.md of a trained run from its logged rows."""
    scen = get_scenario(run.scenario)
    expected, twin, source = expected_incidents(run)
    truth: dict[str, Any] = {
        "scenario": run.scenario, "at": run.at, "strength": run.strength,
        "injected": run.injected, "expected": expected, "twin": source,
    }  # fmt: skip
    (run.run_dir / TRUTH).write_text(json.dumps(truth, indent=2) + "\n")
    rows, at, strength = run.rows, run.at, run.strength
    if plot:
        plot_run(run.run_dir, rows, truth, f"{run.scenario}: {scen.summary}", twin)
    end = at + scen.n_steps(strength) - 1
    incidents = [incident_numbers(rows, e["onset_step"], e["peak_step"], end) for e in expected]
    tail = [r["loss"] for r in rows[-50:]]
    notes = replay_notes(run.scenario, run.run_dir, rows, scen.ckpt_before(at), at, strength)
    if run.scenario == "lr_too_high":
        notes = drift_lines(rows, at)
    result = SimResult(
        run.scenario, run.run_dir, truth, incidents, sum(tail) / len(tail), seconds,
        n_params, device, notes,
    )  # fmt: skip
    write_readme(result, run.cfg)
    return result


def refresh(run_dir: Path, *, plot: bool = True) -> SimResult:
    """Rewrite truth.json, README.md and loss.png of a simulated run from what it logged,
    without training it again (after a change to how the truth is derived).

    The run must be the scenario's default `at`/`strength` on a tiny or small preset, or
    carry them in truth.json; its config.json must be exactly what they give (checked)."""
    run_dir = Path(run_dir)
    try:
        old = json.loads((run_dir / TRUTH).read_text())
        logged = json.loads((run_dir / CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise SimulationError(f"{run_dir}: not a simulated run ({exc})") from exc
    scen = get_scenario(str(old.get("scenario")))
    base = base_config(logged["preset"], logged["total_steps"], logged["device"], logged["seed"])
    at = int(old.get("at", scen.default_at(base)))
    strength = float(old.get("strength", scen.default_strength))
    cfg = scen.configure(base, at, strength)
    if cfg.to_dict() != logged:
        raise SimulationError(
            f"{run_dir / CONFIG}: not the config `forensics simulate {scen.name}` gives for "
            f"at={at}, strength={strength:g}; simulate it again instead"
        )
    readme = (run_dir / README).read_text() if (run_dir / README).is_file() else ""
    timing = re.search(r"; (\d+) s of training on (\w+)", readme)
    seconds, device = (float(timing[1]), timing[2]) if timing else (math.nan, "unknown")
    rows = read_metrics(run_dir)
    run = Trained(scen.name, run_dir, base, cfg, at, strength, old.get("injected", []), rows)
    return finish(run, seconds, GPT(cfg.model).num_params(), device, plot)


def simulate_all(out: Path, **kwargs: Any) -> list[SimResult]:
    """Every scenario, each into `out/<scenario>/`; at/strength keep their defaults."""
    if kwargs.get("at") is not None or kwargs.get("strength") is not None:
        raise SimulationError(
            "--all runs every scenario with its own defaults; drop --at/--strength"
        )
    return [simulate(name, Path(out) / name, **kwargs) for name in SCENARIOS]

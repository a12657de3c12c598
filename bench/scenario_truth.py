"""Does `forensics analyze` (with replay) name the injected cause on fresh simulator runs?

For every scenario, draws fresh (seed, injection step) pairs -- never the bundled sample
runs' seed 1337 -- trains the run (`forensics simulate SCENARIO --seed S --at N`,
checkpointing every tenth of the run besides the scenario's own checkpoint before the
injection), analyses it
with replay (`forensics analyze DIR`), and prints one row per run: the true root cause
(truth.json), the cause the incident at the injection states, the replay verdict of that
cause, and the trigger replay named (from the `contributions` table). A row passes when the
stated cause is the true one, replay confirmed it, and, where the truth is `stale_beta2` (a
rare-band burst is its trigger), the trigger `rare_tokens` is named; a clean run passes with
no incident. The true root cause of a `stale_beta2` run is `stale_beta2` only where
restarting it from the checkpoint before the burst with beta2 = 0.95 (the fix), the burst
kept, removes at least half of the echo above the same run without the burst, batch for
batch ("fix removes"); else the
burst did the damage by itself and the truth is its trigger, `rare_tokens`.

    python bench/scenario_truth.py [--pairs 1] [--steps 300] [--seed S] [--scenario NAME]
                                   [--device cpu|cuda|auto]

`--device cuda` trains and replays every run on the GPU (the CUDA path end to end: the
simulator's run, the checkpoint resume, the re-run and every counterfactual).

The draw is printed (`--seed` repeats it). No reference timing: this benchmark measures
truth, not speed; each run's wall time is printed for budgeting (~1 min per run on a
loaded 2-core machine at 300 steps).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.analyze import AnalyzeOptions, analyze  # noqa: E402
from forensics.sim.scenarios import SCENARIOS  # noqa: E402
from forensics.sim.simulate import simulate  # noqa: E402
from forensics.store import open_store  # noqa: E402

SAMPLE_SEED = 1337  # the bundled sample runs' seed: never drawn
TRIGGER_OF = {"stale_beta2": "rare_tokens"}  # scenarios whose fault has a separate trigger


def at_range(scenario: str, steps: int) -> tuple[int, int]:
    """Injection steps a scenario accepts in a `steps`-step run, away from the very start
    (the model must have learned something a fault can destroy)."""
    if scenario == "lr_too_high":  # `at` is the end of warm-up
        return max(8, steps // 4), steps // 2
    burst = {"stale_beta2": 8, "data_corruption": 30, "fp16_overflow": 4}.get(scenario, 1)
    return max(21, int(steps * 0.3)), min(int(steps * 0.7), steps - 10 - burst + 1)


def draw(rng: random.Random, scenario: str, steps: int) -> tuple[int, int]:
    seed = SAMPLE_SEED
    while seed == SAMPLE_SEED:
        seed = rng.randrange(1, 1_000_000)
    lo, hi = at_range(scenario, steps)
    return seed, rng.randint(lo, hi)


def ckpt_every(steps: int) -> int:
    """Checkpoint period of a drawn run: ten per run, as a real run saves every N steps, so
    replay starts from the latest one before wherever detection puts the onset."""
    return max(10, steps // 10)


def train(scenario: str, seed: int, at: int, steps: int, work: Path, device: str = "cpu") -> Path:
    """Simulate the pair into work/<scenario>-<seed>-<at> (truth.json with it); its folder."""
    run_dir = work / f"{scenario}-{seed}-{at}"
    simulate(
        scenario, run_dir, steps=steps, seed=seed, at=at, device=device, plot=False,
        ckpt_every=ckpt_every(steps),
    )  # fmt: skip
    return run_dir


def check(
    scenario: str,
    seed: int,
    at: int,
    steps: int,
    work: Path,
    device: str = "cpu",
    *,
    trained: bool = False,
) -> dict[str, Any]:
    """Simulate, analyse with replay, and read what the store says about the injection.
    trained=True: `train` already wrote the run folder (a caller that reads its truth.json
    first); it is analysed as it is."""
    t0 = time.perf_counter()
    run_dir, out = work / f"{scenario}-{seed}-{at}", work / f"{scenario}-{seed}-{at}-out"
    if not trained:
        train(scenario, seed, at, steps, work, device)
    analyze(run_dir, out, options=AnalyzeOptions(report=False, device=device))
    truth = json.loads((run_dir / "truth.json").read_text())["expected"]
    onset = int(truth[0]["onset_step"]) if truth else at  # lr_too_high: after the warm-up
    peak = int(truth[0]["peak_step"]) if truth else at
    end = truth[0].get("typing", {}).get("recovery_step") if truth else at
    with open_store(out / "forensics.duckdb") as store:
        row = read_outcome(store, run_dir.name, onset, peak, end if end is not None else steps)
    row.update(scenario=scenario, seed=seed, step=at, seconds=time.perf_counter() - t0)
    # the root cause truth.json states: the scenario's, or for a trigger + amplifier fault
    # the trigger where fixing the amplifier does not remove half of the damage
    row["injected"] = truth[0]["cause"] if truth else "none"
    share = truth[0].get("attribution", {}).get("share_removed") if truth else None
    row["fix_removes"] = "-" if share is None else f"{share:.0%}"
    row["ok"] = passes(row)
    return row


def read_outcome(
    store: Any, run: str, at: int, peak: int | None = None, end: int | None = None
) -> dict[str, Any]:
    """The incident nearest the expected onset (truth.json; within 40 steps), else one whose
    peak is within 10 steps of the expected peak or inside the true incident's span (`at` ..
    `end`: its recovery step, or the end of the run when it did not recover) -- the location
    rule of bench/accuracy.py: the onset of a slow climb is ill-defined, truth.json's being
    its first point 30% above the late warm-up, detection's the start of the climb. As
    there, any of the incident's peaks counts: a climb merged into an incident that began
    with an earlier spike keeps the climb's peaks, though its highest is the spike. Gives
    its stated cause, replay verdict and the causes `contributions` holds per role."""
    last = at if end is None else end
    top = at if peak is None else peak
    rows = store.query(
        "SELECT incident_id, cause, replay, onset_step, peak_step, peaks FROM incidents "
        "WHERE run_id = ?",
        [run],
    ).to_dicts()

    def located(r: dict[str, Any]) -> bool:
        steps = [int(p["step"]) for p in json.loads(r["peaks"] or "[]")] or [r["peak_step"]]
        return (
            abs(r["onset_step"] - at) <= 40
            or any(abs(s - top) <= 10 for s in steps)
            or at <= r["peak_step"] <= last
        )

    inc = sorted(
        (r for r in rows if located(r)),
        key=lambda r: (abs(r["onset_step"] - at) > 40, abs(r["onset_step"] - at)),
    )[:1]
    n = store.query("SELECT count(*) AS n FROM incidents WHERE run_id = ?", [run]).item()
    if not inc:
        return {"stated": "-", "replay": "-", "trigger": "-", "amplifier": "-", "incidents": n}
    roles = store.query(
        "SELECT role, cause, share_removed FROM contributions WHERE run_id = ? AND incident_id = ?",
        [run, inc[0]["incident_id"]],
    ).to_dicts()

    def named(role: str) -> str:
        got = [
            f"{r['cause']} ({r['share_removed']:.0%})" if r["share_removed"] is not None
            else r["cause"]
            for r in roles if r["role"] == role
        ]  # fmt: skip
        return ", ".join(got) or "-"

    return {
        "stated": inc[0]["cause"], "replay": inc[0]["replay"], "trigger": named("trigger"),
        "amplifier": named("amplifier"), "incidents": n,
    }  # fmt: skip


def passes(row: dict[str, Any]) -> bool:
    if row["injected"] == "none":
        return row["incidents"] == 0
    want = TRIGGER_OF.get(row["injected"])  # an amplifier's trigger is named beside it
    trigger_ok = want is None or row["trigger"].startswith(want)
    return row["stated"] == row["injected"] and row["replay"] == "confirmed" and trigger_ok


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| scenario | seed | step | true root cause | fix removes | stated cause | replay "
        "verdict | trigger named | amplifier | ok | s |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['seed']} | {r['step']} | {r['injected']} | "
            f"{r.get('fix_removes', '-')} | {r['stated']} "
            f"| {r['replay']} | {r['trigger']} | {r['amplifier']} | "
            f"{'yes' if r['ok'] else 'NO'} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1, help="fresh (seed, step) pairs per scenario")
    ap.add_argument("--steps", type=int, default=300, help="training steps per run")
    ap.add_argument("--seed", type=int, default=None, help="seed of the draw (default: fresh)")
    ap.add_argument("--scenario", action="append", help="only these scenarios (repeatable)")
    ap.add_argument(
        "--device", default="cpu", help="simulate and replay here: cpu (default), cuda, auto"
    )
    args = ap.parse_args()
    draw_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f"draw seed {draw_seed} (--seed {draw_seed} repeats this draw)", flush=True)
    rng = random.Random(draw_seed)
    names = args.scenario or list(SCENARIOS)
    pairs = [(s, *draw(rng, s, args.steps)) for s in names for _ in range(args.pairs)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scenario, seed, at in pairs:
            rows.append(check(scenario, seed, at, args.steps, Path(tmp), args.device))
            r = rows[-1]
            verdict = "ok" if r["ok"] else "WRONG"
            print(
                f"{scenario} seed {seed} at {at}: stated {r['stated']}, replay {r['replay']}, "
                f"trigger {r['trigger']} -> {verdict}",
                flush=True,
            )
    print(table(rows))
    good = sum(r["ok"] for r in rows)
    print(f"\n{good} of {len(rows)} runs: the true root cause stated and confirmed by replay")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""A fixed, realistic run store for the report tests (built by conftest.py fixtures).

Three runs, built from closed-form curves (no random generator, so the goldens are the
same on every machine):
- `gpt-1b-fp16`: logged every step with wall-clock time and tokens/s; a recoverable
  rare-token spike with full replay (token histogram, activation norms), a lingering
  stale-Adam spike without replay, and a divergent fp16 loss-scale collapse ending in NaN.
- `llm-13b-bf16`: logged every 10 steps, no wall-clock time, no throughput; a divergence
  at the end of warm-up and a recoverable spike whose cause lessons.yaml does not know.
- `clean-350m`: no incident, one near-miss.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from forensics.detect.store import DETECTED_KEY
from forensics.replay.verdicts import apply_verdicts
from forensics.store import open_store
from forensics.store.db import Store

T0 = 1709625600.0  # 2024-03-05 08:00 UTC
NAN = float("nan")


def noise(s: int, scale: float) -> float:
    """Deterministic pseudo-noise in [-scale, scale]."""
    return scale * (0.6 * math.sin(12.9898 * s) + 0.4 * math.sin(78.233 * s + 1.0))


def base_loss(s: int) -> float:
    return 2.0 + 8.0 / math.sqrt(1 + s / 50)


def spike(s: int, onset: int, peak: int, height: float, tau: float) -> float:
    """Linear rise from onset to peak, then exponential decay with time constant tau."""
    if s < onset:
        return 0.0
    if s <= peak:
        return height * (s - onset + 1) / (peak - onset + 1)
    return height * math.exp(-(s - peak) / tau)


# ----- run A: gpt-1b-fp16 -------------------------------------------------------------------
def gpt_loss(s: int) -> float:
    if s >= 7100:
        return NAN
    v = base_loss(s) + noise(s, 0.015)
    v += spike(s, 2400, 2406, 3.1, 5.0) + spike(s, 4200, 4215, 1.9, 350.0)
    if s >= 7000:
        v += 4.8 * (s - 7000 + 1) / 100
    return v


def gpt_grad(s: int) -> float:
    if s >= 7100:
        return NAN
    v = 1.5 + noise(s + 7, 0.2)
    v += spike(s, 2400, 2405, 82.0, 3.0) + spike(s, 4200, 4212, 10.0, 200.0)
    if s >= 7000:
        v *= 1.09 ** (s - 7000)
    return v


def cosine_lr(s: int, peak: float, warmup: int, total: int) -> float:
    if s < warmup:
        return peak * (s + 1) / warmup
    frac = (s - warmup) / (total - warmup)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))


def gpt_metrics() -> dict[str, Callable[[int], float]]:
    return {
        "loss": gpt_loss,
        "grad_norm": gpt_grad,
        "lr": lambda s: cosine_lr(s, 3e-4, 500, 8000),
        "loss_scale": lambda s: 65536.0 if s < 7000 else max(1.0, 65536.0 / 2 ** ((s - 7000) // 6)),
        "tokens_per_s": lambda s: 98000.0 + noise(s + 3, 900.0),
    }


# ----- run B: llm-13b-bf16 ------------------------------------------------------------------
def b_loss(s: int) -> float:
    v = base_loss(s // 2) + noise(s, 0.02)
    if s >= 2500:  # diverges at the end of warm-up and settles far above
        v += min(1.6, 1.6 * (s - 2490) / 200)
    return v + spike(s, 5200, 5220, 1.2, 15.0)


def b_metrics() -> dict[str, Callable[[int], float]]:
    return {
        "loss": b_loss,
        "lr": lambda s: cosine_lr(s, 1.2e-4, 2500, 6000),
        "grad_norm": lambda s: 0.9 + noise(s + 1, 0.1) + spike(s, 2500, 2540, 6.0, 400.0),
    }


# ----- run C: clean-350m --------------------------------------------------------------------
def c_metrics() -> dict[str, Callable[[int], float]]:
    return {"loss": lambda s: base_loss(s) + noise(s, 0.01), "lr": lambda s: 6e-4}


def metric_rows(
    run: str, steps: range, metrics: dict[str, Callable[[int], float]], wall: float | None
) -> pl.DataFrame:
    rows: dict[str, list[Any]] = {k: [] for k in ("step", "metric", "value", "wall_time")}
    for name, fn in metrics.items():
        for s in steps:
            rows["step"].append(s)
            rows["metric"].append(name)
            rows["value"].append(fn(s))
            rows["wall_time"].append(T0 + s * wall if wall else None)
    frame = pl.DataFrame(
        rows,
        schema={"step": pl.Int64, "metric": pl.Utf8, "value": pl.Float64, "wall_time": pl.Float64},
    )
    return frame.with_columns(
        pl.lit(run).alias("run_id"),
        pl.col("metric").alias("raw_name"),
        pl.lit(f"runs/{run}/metrics.jsonl").alias("source"),
    )


def ev(key: str, value: Any, note: str = "") -> dict[str, Any]:
    return {"key": key, "value": value, "note": note}


INCIDENT_COLS = [
    "steps_lost",
    "run_id",
    "incident_id",
    "metric",
    "onset_step",
    "peak_step",
    "end_step",
    "pre_value",
    "peak_value",
    "post_value",
    "grad_norm_peak",
    "type",
    "cause",
    "confidence",
    "recovery",
    "restart_checkpoint_step",
    "peaks",
    "evidence",
    "features",
    "replay",
    "detected_at",
    # Decided by detect since issue 11 (docs/definitions.md); the report only renders them.
    "recovery_step",
    "severity",
    "grad_norm_peak_step",
    "grad_norm_baseline",
    "seconds_per_step",
    "tokens_per_step",
    "world_size",
]


def add_incident(store: Store, **kw: Any) -> None:
    """An incidents row as detect writes it: the recovery step of a recoverable incident is
    its end step, steps lost follows docs/definitions.md, the cost factors are given."""
    kw.setdefault("detected_at", "2024-06-01 00:00:00")
    if kw.get("type") == "recoverable":
        kw.setdefault("recovery_step", kw.get("end_step"))
        kw.setdefault("steps_lost", kw["recovery_step"] - kw["onset_step"])
    kw.setdefault("severity", "critical" if kw.get("type") == "divergent" else "major")
    logged = _logged(store, kw["run_id"], kw["metric"], kw["peak_step"])
    if kw.get("peak_value") is None:  # detection stores the logged value at the peak
        kw["peak_value"] = logged
    assert logged is not None and math.isclose(kw["peak_value"], logged, rel_tol=1e-3), (
        f"incident {kw['incident_id']} of {kw['run_id']}: peak {kw['peak_value']} at step "
        f"{kw['peak_step']} is not its logged {kw['metric']} ({logged})"
    )
    if kw.get("grad_norm_peak") is not None:
        kw["grad_norm_peak"], kw["grad_norm_peak_step"] = _logged_grad_peak(store, kw)
    for k in ("peaks", "evidence", "features"):
        kw[k] = json.dumps(kw.get(k, [] if k != "features" else {}))
    values = [kw.get(c) for c in INCIDENT_COLS]
    marks = ", ".join("?" for _ in INCIDENT_COLS)
    store.con.execute(
        f"INSERT INTO incidents ({', '.join(INCIDENT_COLS)}) VALUES ({marks})", values
    )


def _logged(store: Store, run: str, metric: str, step: int) -> float | None:
    rows = store.con.execute(
        "SELECT value FROM metrics WHERE run_id = ? AND metric = ? AND step = ?",
        [run, metric, step],
    ).fetchall()
    return float(rows[0][0]) if rows else None


def _logged_grad_peak(store: Store, kw: dict[str, Any]) -> tuple[float, int]:
    """The largest logged grad norm from 3 steps before the onset to the peak, and its step:
    what detect/features.py stores, so the post-mortem's sentence agrees with its excerpt."""
    rows = store.con.execute(
        "SELECT value, step FROM metrics WHERE run_id = ? AND metric = 'grad_norm' "
        "AND step BETWEEN ? AND ? AND isfinite(value) ORDER BY value DESC, step LIMIT 1",
        [kw["run_id"], kw["onset_step"] - 3, kw["peak_step"]],
    ).fetchall()
    assert rows, f"no logged grad_norm around incident {kw['incident_id']} of {kw['run_id']}"
    return float(rows[0][0]), int(rows[0][1])


def add_finding(
    store: Store,
    run: str,
    n: int,
    rule: str,
    cause: str,
    fired: bool,
    conf: float | None,
    evidence: list[dict[str, Any]],
) -> None:
    store.con.execute(
        "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, NULL, ?, 'not_run')",
        [run, n, rule, cause, fired, conf, json.dumps(evidence)],
    )


def add_replay(
    store: Store,
    run: str,
    n: int,
    probe: str,
    hyp: str,
    verdict: str,
    numbers: dict[str, Any],
    detail: str,
) -> None:
    store.con.execute(
        "INSERT INTO replays VALUES (?, ?, ?, ?, ?, ?, ?, 'cpu', 12.5, '2024-06-01 00:00:00')",
        [run, n, probe, hyp, verdict, json.dumps(numbers), detail],
    )


def add_source(store: Store, run: str, path: str, kind: str, fmt: str, rows: int) -> None:
    store.con.execute(
        "INSERT INTO sources VALUES (?, ?, ?, ?, NULL, ?, '[]', '2024-06-01 00:00:00')",
        [run, path, kind, fmt, rows],
    )


def token_histogram() -> dict[str, Any]:
    ids = [50256, 198, 13, 262, 31204, 48500, 17520, 40243, 24934, 43453]
    counts = [120, 2100, 1800, 1500, 9100, 7400, 5200, 2300, 900, 40]
    freq = [1e-3, 0.03, 0.028, 0.025, 2e-8, 5e-8, 1e-7, 3e-7, 1e-6, 2e-6]
    labels = [
        "<|endoftext|>",
        "\\n",
        ".",
        " the",
        "ÃÂÃÂ",
        " SolidGoldMagikarp",
        "--------",
        "\\u200b",
        " guiActive",
        "[...]",
    ]
    return {
        "token_ids": ids,
        "counts": counts,
        "train_freq": freq,
        "labels": labels,
        "batch_tokens": 524288,
    }


def act_norms() -> dict[str, Any]:
    layers = list(range(12))
    control = [round(12 + 1.5 * i, 2) for i in layers]
    value = [round(c * (1 + 0.9 * max(0, i - 5)), 2) for i, c in enumerate(control)]
    return {"layer": layers, "value": value, "control": control}


def build_gpt(store: Store) -> None:
    run = "gpt-1b-fp16"
    store.upsert_run(
        run,
        f"runs/{run}",
        "jsonl",
        {
            "precision": "fp16",
            "world_size": 64,
            "global_batch_size": 256,
            "seq_len": 2048,
            "beta2": 0.999,
            "peak_lr": 3e-4,
        },
    )
    store.insert_metrics(metric_rows(run, range(0, 7200), gpt_metrics(), 5.35))
    add_source(store, run, f"runs/{run}/metrics.jsonl", "metrics", "jsonl", 36000)
    add_source(store, run, f"runs/{run}/config.yaml", "config", "yaml", 1)
    for s in range(1000, 8000, 1000):
        store.con.execute(
            "INSERT INTO checkpoints (run_id, step, path, format, source) VALUES (?, ?, ?, ?, ?)",
            [run, s, f"runs/{run}/ckpt/step{s}.pt", "torch", f"runs/{run}/ckpt"],
        )
    add_incident(
        store,
        run_id=run,
        incident_id=1,
        metric="loss",
        onset_step=2400,
        peak_step=2406,
        end_step=2425,
        pre_value=3.135,
        peak_value=6.243,
        post_value=3.14,
        grad_norm_peak=83.52,
        type="recoverable",
        cause="rare_tokens",
        confidence=0.82,
        recovery="skip_batch",
        peaks=[{"step": 2406, "value": 6.243}],
        evidence=[
            ev("loss_ratio", 1.99, "peak / pre-spike"),
            ev("grad_norm_ratio", 55.7, "grad-norm peak / pre-spike median"),
            ev("recovery_steps", 25),
        ],
        features={"z_score": 41.2, "duration_steps": 25, "shape": "sharp"},
        replay="confirmed",
    )
    add_finding(
        store,
        run,
        1,
        "R001-rare-tokens",
        "rare_tokens",
        True,
        0.82,
        [
            ev("rare_token_fraction", 0.31, "tokens with train frequency < 1e-6"),
            ev("grad_norm_ratio", 55.7),
            ev("loss_scale_change", 0, "no overflow"),
        ],
    )
    add_finding(
        store,
        run,
        1,
        "R002-stale-beta2",
        "stale_beta2",
        False,
        0.12,
        [
            ev("quiet_steps_before", 40, "needs ≥ 500 quiet steps"),
            ev("update_norm", None, "update_norm not logged"),
        ],
    )
    add_finding(
        store,
        run,
        1,
        "R003-fp16-overflow",
        "fp16_overflow",
        False,
        0.05,
        [ev("loss_scale_drops", 0, "loss scale stayed at 65536")],
    )
    add_replay(
        store,
        run,
        1,
        "token_histogram",
        "rare_tokens",
        "confirmed",
        {"token_histogram": token_histogram(), "rare_fraction": 0.31, "kl_to_train": 4.21},
        "31% of the batch are tokens seen less than once per million in training",
    )
    add_replay(
        store,
        run,
        1,
        "act_norms",
        "rare_tokens",
        "confirmed",
        {"act_norms": act_norms(), "max_ratio": 5.5, "worst_layer": 11},
        "layers 6–11 run 2–5.5× hotter on this batch than on a control batch",
    )
    add_replay(
        store,
        run,
        1,
        "fresh_optimizer",
        "stale_beta2",
        "refuted",
        {"update_norm_ratio": 1.04},
        "a fresh Adam state gives the same update norm, so the state is not stale",
    )
    add_incident(
        store,
        run_id=run,
        incident_id=2,
        metric="loss",
        onset_step=4200,
        peak_step=4215,
        end_step=5400,
        pre_value=2.862,
        peak_value=4.764,
        post_value=2.95,
        grad_norm_peak=11.57,
        type="lingering",
        cause="stale_beta2",
        confidence=0.64,
        recovery="lower_lr",
        peaks=[{"step": 4215, "value": 4.764}],
        evidence=[ev("loss_ratio", 1.66), ev("half_life_steps", 243, "slow decay")],
        features={"z_score": 22.5, "duration_steps": 1200},
        replay="not_run",
    )
    add_finding(
        store,
        run,
        2,
        "R002-stale-beta2",
        "stale_beta2",
        True,
        0.64,
        [ev("quiet_steps_before", 1790, "≥ 500 quiet steps"), ev("beta2", 0.999)],
    )
    add_finding(
        store,
        run,
        2,
        "R004-lr-too-high",
        "lr_too_high",
        True,
        0.31,
        [ev("lr_at_onset", 2.3e-4), ev("steps_since_warmup", 3700, "long after warm-up")],
    )
    add_finding(
        store,
        run,
        2,
        "R001-rare-tokens",
        "rare_tokens",
        False,
        0.08,
        [ev("rare_token_fraction", None, "no batch manifest for step 4200")],
    )
    add_incident(
        store,
        run_id=run,
        incident_id=3,
        metric="loss",
        onset_step=7000,
        peak_step=7099,
        end_step=7199,
        pre_value=2.663,
        peak_value=7.475,
        post_value=NAN,
        grad_norm_peak=None,
        type="divergent",
        cause="fp16_overflow",
        confidence=0.71,
        recovery="restart_from_checkpoint",
        steps_lost=1199,
        restart_checkpoint_step=6000,
        evidence=[ev("loss_scale_min", 1.0, "hit the floor"), ev("nan_step", 7100)],
        features={"divergence": True},
        replay="inconclusive",
    )
    add_finding(
        store,
        run,
        3,
        "R003-fp16-overflow",
        "fp16_overflow",
        True,
        0.71,
        [ev("loss_scale_drops", 16, "65536 → 1 in 96 steps"), ev("precision", "fp16")],
    )
    add_finding(store, run, 3, "R002-stale-beta2", "stale_beta2", False, 0.2,
                [ev("update_norm", None, "update_norm not logged")])  # fmt: skip
    add_replay(
        store,
        run,
        3,
        "loss_scale_replay",
        "fp16_overflow",
        "inconclusive",
        {"overflow_steps": 14, "min_loss_scale": 1.0, "replayed_steps": [6990, 7000]},
        "overflows reproduce in fp16 but the checkpoint at 7000 is already unstable",
    )
    store.con.execute(
        "INSERT INTO near_misses VALUES (?, 3100, 'loss', 2.93, 2.6, 1.127, ?)",
        [run, "below the 1.2× loss threshold"],
    )


def build_b(store: Store) -> None:
    run = "llm-13b-bf16"
    store.upsert_run(
        run,
        f"runs/{run}",
        "megatron",
        {"precision": "bf16", "global_batch_size": 1024, "seq_len": 2048},
    )
    store.insert_metrics(metric_rows(run, range(0, 6000, 10), b_metrics(), None))
    add_source(store, run, f"runs/{run}/metrics.jsonl", "metrics", "megatron", 1800)
    add_incident(
        store,
        run_id=run,
        incident_id=1,
        metric="loss",
        onset_step=2500,
        peak_step=2690,
        end_step=None,
        pre_value=None,
        peak_value=None,
        post_value=None,
        grad_norm_peak=6.9,
        type="divergent",
        cause="lr_too_high",
        confidence=0.55,
        recovery="lower_lr",
        evidence=[ev("lr_at_onset", 1.2e-4, "warm-up just ended")],
        replay="not_run",
    )
    add_finding(
        store,
        run,
        1,
        "R004-lr-too-high",
        "lr_too_high",
        True,
        0.55,
        [ev("steps_since_warmup", 0, "onset at the end of warm-up")],
    )
    add_finding(
        store,
        run,
        1,
        "R005-attn-logits",
        "attention_logits",
        True,
        0.42,
        [ev("max_attn_logit", None, "max_attn_logit not logged; pattern only")],
    )
    add_incident(
        store,
        run_id=run,
        incident_id=2,
        metric="loss",
        onset_step=5200,
        peak_step=5220,
        end_step=5290,
        pre_value=None,
        peak_value=None,
        grad_norm_peak=None,
        type="recoverable",
        cause="unknown",
        confidence=None,
        recovery=None,
    )
    for step, metric, value, base, detail in [
        (1800, "loss", 3.35, 3.1, "below the 1.15× threshold"),
        (4100, "grad_norm", 2.1, 1.0, ""),
    ]:
        store.con.execute(
            "INSERT INTO near_misses VALUES (?, ?, ?, ?, ?, ?, ?)",
            [run, step, metric, value, base, value / base, detail],
        )


def build_c(store: Store) -> None:
    run = "clean-350m"
    store.upsert_run(run, f"runs/{run}", "jsonl", {"precision": "bf16"})
    store.insert_metrics(metric_rows(run, range(0, 3001, 100), c_metrics(), 2.0))
    store.con.execute("INSERT INTO near_misses VALUES (?, 1500, 'loss', 2.7, 2.45, 1.1, '')", [run])


# The cost factors detect stores per incident (recovery.py): seconds per step from the
# wall clock, tokens per step from the config, GPUs from the config.
COST_FACTORS = {
    "gpt-1b-fp16": (5.35, 256 * 2048, 64),
    "llm-13b-bf16": (None, 1024 * 2048, None),
}


def _cost_factors(store: Store) -> None:
    for run, (secs, tok, world) in COST_FACTORS.items():
        store.con.execute(
            "UPDATE incidents SET seconds_per_step = ?, tokens_per_step = ?, world_size = ?, "
            "tokens_lost = steps_lost * ?, "
            "gpu_hours_lost = steps_lost * ? * ? / 3600 WHERE run_id = ?",
            [secs, tok, world, tok, secs, world, run],
        )


def _run_cost(store: Store) -> None:
    """detect's `run_cost` row: no incident of these runs overlaps another, so the union is
    the sum; unknown when one incident's steps lost is (an extent the fixture leaves open)."""
    store.con.execute(
        "INSERT INTO run_cost SELECT run_id, count(*), "
        "CASE WHEN count(steps_lost) = count(*) THEN sum(steps_lost) END, 0, "
        "CASE WHEN count(tokens_lost) = count(*) THEN sum(tokens_lost) END, "
        "CASE WHEN count(gpu_hours_lost) = count(*) THEN sum(gpu_hours_lost) END, "
        "CASE WHEN count(cost_usd) = count(*) THEN sum(cost_usd) END "
        "FROM incidents GROUP BY run_id"
    )


def _hypotheses(store: Store) -> None:
    """detect's `hypotheses` rows, one per cause of each incident's findings, as
    detect/evidence.py words them: supported (a rule fired), not_evaluable (every input
    missing: `needs` names them), against (its rule did not fire on logged inputs)."""
    rows = store.query(
        "SELECT run_id, incident_id, cause, triggered, confidence, rule_id, evidence "
        "FROM findings ORDER BY run_id, incident_id, triggered DESC, confidence DESC, rule_id"
    ).to_dicts()
    seen: dict[tuple[str, int], list[str]] = {}
    for f in rows:
        done = seen.setdefault((f["run_id"], f["incident_id"]), [])
        if f["cause"] in done:
            continue
        done.append(f["cause"])
        evs = json.loads(f["evidence"] or "[]")
        missing = [e["key"] for e in evs if "not logged" in str(e.get("note"))]
        facts = ", ".join(
            f"{e['key']}={'n/a' if e['value'] is None else e['value']}"
            for e in evs
            if e["key"] not in missing
        )
        if f["triggered"]:
            status, reason, needs = "supported", facts, []
        elif evs and len(missing) == len(evs):
            status, reason, needs = "not_evaluable", f"needs {', '.join(missing)}", missing
        else:
            reason = f"condition not met with its inputs logged: {facts}"
            status, needs = "against", []
        conf = f["confidence"] if f["triggered"] else 0.0
        run, n = f["run_id"], f["incident_id"]
        rule = f["rule_id"]
        add_hypothesis(store, run, n, len(done), f["cause"], status, conf, rule, reason, needs)


def add_hypothesis(
    store: Store,
    run: str,
    n: int,
    rank: int,
    cause: str,
    status: str,
    conf: float | None,
    rule: str | None,
    reason: str,
    needs: list[str],
) -> None:
    store.con.execute(
        "INSERT INTO hypotheses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '[]')",
        [run, n, rank, cause, status, conf, rule, reason, json.dumps(needs)],
    )


def _explained(store: Store) -> None:
    """The rest of what detect stores beside its incidents (issues 10 and 15): an incident
    with no rule finding but weighed causes, what to log next, a recurrence in another run
    of the store, and what the screen did not look at."""
    from forensics.detect.coverage import Coverage, write

    run = "llm-13b-bf16"
    add_hypothesis(store, run, 2, 1, "rare_tokens", "not_evaluable", 0.0, "rare-tokens",
                   "needs grad_norm_every_step; from the log: rise_steps=20",
                   ["grad_norm_every_step"])  # fmt: skip
    add_hypothesis(store, run, 2, 2, "lr_too_high", "against", 0.0, "lr-too-high",
                   'refuted by the log (type == "recoverable" and lr_frac < 0.5): '
                   "lr_frac=0.31, type=recoverable", [])  # fmt: skip
    store.con.execute(
        "INSERT INTO log_next (run_id, incident_id, rank, metric, separates, why) "
        "VALUES (?, 2, 1, 'grad_norm', '[\"rare_tokens\"]', ?)",
        [run, "log the pre-clip gradient norm every step (a batch's gradient lasts one "
              "step) to evaluate rare tokens"],
    )  # fmt: skip
    for rid, who, peak in [(1, run, 5220), (1, "llm-13b-bf16-rerun", 5221)]:
        store.con.execute(
            "INSERT INTO recurrences (recurrence_id, step, run_id, peak_step, n_runs, "
            "n_covering, shared_data_order, by_chance, absent_runs) "
            "VALUES (?, 5220, ?, ?, 2, 3, NULL, 0.0021, ?)",
            [rid, who, peak, json.dumps(["llm-13b-bf16-lr2"])],
        )
    for name, points, last, upto, n_unscreened in [  # start-up left out by the screen
        ("gpt-1b-fp16", 7200, 7199, 199, 200),
        ("llm-13b-bf16", 600, 5990, 190, 20),
        ("clean-350m", 31, 3000, 400, 5),
    ]:
        write(store, name, Coverage("loss", points, 0, last, upto + 1, n_unscreened, upto, False))


def finish(store: Store) -> None:
    """What the pipeline stages add after the rows above: detect's cost factors, hypotheses,
    log-next, recurrence and coverage rows and its "detected" mark, replay's verdicts
    applied to findings and incidents."""
    _cost_factors(store)
    _run_cost(store)
    _hypotheses(store)
    _explained(store)
    for run in store.run_names():  # detect records it even for a run with no incident
        store.con.execute("INSERT OR REPLACE INTO meta VALUES (?, 'fixture')",
                          [DETECTED_KEY + run])  # fmt: skip
        apply_verdicts(store, run)


def build_store(path: Path) -> Path:
    with open_store(path) as store:
        build_gpt(store)
        build_b(store)
        build_c(store)
        finish(store)
    return path


RUNS = ["gpt-1b-fp16", "llm-13b-bf16", "clean-350m"]


def render_docs(store: Store, run: str, *, png: bool = True) -> dict[str, str]:
    """The run's Markdown as `forensics report` writes it, without writing figures."""
    from forensics.report import render
    from forensics.report.context import Options, build_report

    env = render.environment()
    report = build_report(store, run, render.knowledge(env), env, Options(gpu_hour_cost=2.5))
    out = Path("report")
    return render.render_report(report, render.planned(report.figures, out, png), env, out)

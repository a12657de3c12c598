"""Which checkpoint a replay restores (runner.restore_checkpoint): the counterfactual window
starts k // 4 steps before the onset, and the checkpoint must be at or before that start.
The loss logged at the onset is the loss of the model the updates before it made (a too-high
LR kicks the model on an ordinary batch); a checkpoint between the window start and the onset
cut those updates out of the replay and of the halved-LR counterfactual, which then compared
two models already off (every batch "hard" on them: inconclusive). Seen on the simulator's
lr_too_high, seed 688851, warm-up end 77, 300 steps: onset 61, checkpoints at 30, 57, 60."""

from __future__ import annotations

from forensics.replay.context import Checkpoint, Incident, RunData
from forensics.replay.plan import Plan, window_end
from forensics.replay.runner import restore_checkpoint


def _run(*steps: int) -> RunData:
    ckpts = [Checkpoint(s, f"ckpt_{s:06d}.pt", True, True, "forensics-gpt") for s in steps]
    return RunData("r", {}, {}, ckpts, {}, None)


def _plan(start: int, offending: int) -> Plan:
    inc = Incident(1, offending, offending + 38, None, 4.4, "lr_too_high")
    return Plan(inc, offending, 4.4, 0.1, [], [], start, start + 20, 20)


def test_a_checkpoint_inside_the_lead_is_not_the_start() -> None:
    assert restore_checkpoint(_run(30, 57, 60), _plan(55, 61)).step == 30


def test_a_checkpoint_at_the_window_start_is_taken() -> None:
    assert restore_checkpoint(_run(30, 55, 60), _plan(55, 61)).step == 55


def test_no_checkpoint_that_early_falls_back_to_the_latest_before_the_offending_step() -> None:
    assert restore_checkpoint(_run(58, 60), _plan(55, 61)).step == 60


def test_an_unusable_early_checkpoint_falls_back_too() -> None:
    data = _run(30, 60)
    data.checkpoints[0].has_optimizer = False  # no Adam moments: cannot re-run steps
    assert restore_checkpoint(data, _plan(55, 61)).step == 60


def test_the_window_reaches_the_peak_within_4k_steps() -> None:
    # lr_too_high 424895@146 (300 steps): a climb from onset 92 to its peak at 146; a window
    # that stopped at the offending step (134) measured a third of what the LR added
    assert window_end(86, 146, 20) == 146
    assert window_end(86, 1000, 20) == 86 + 80  # a slow divergence: a cost bound


def test_a_hugging_face_run_restores_before_the_lead_too() -> None:
    # the same rule on the HF Trainer path (its checkpoint-N/ folders): the window starts at
    # the checkpoint it restores, so one inside the lead is passed over the same way
    from types import SimpleNamespace

    from forensics.replay.hf_replay import _checkpoint

    run = SimpleNamespace(ckpts=_run(30, 57, 60).checkpoints)
    assert _checkpoint(run, _plan(55, 61)).step == 30  # type: ignore[arg-type]
    assert _checkpoint(SimpleNamespace(ckpts=_run(58, 60).checkpoints), _plan(55, 61)).step == 60  # type: ignore[arg-type]


def _climb_run(*ckpts: int) -> RunData:
    """lr_too_high 343664@91's shape (300 steps): a start-up blow-up at step 8 that one
    incident holds together with the warm-up climb it later joins (from 78, highest at 118)."""
    data = _run(*ckpts)
    loss = {s: 4.5 + 0.01 * (s % 3) for s in range(1, 301)}
    loss |= {8: 11.0, 83: 7.5, 97: 6.6, 118: 8.7}
    data.logged = {"loss": loss}
    return data


def _climb_incident(step: int | None = None) -> Incident:
    return Incident(1, 7, 8, 219, 4.3, "lr_too_high", step, later=[(78, 118)])


def test_an_incident_begun_before_the_first_checkpoint_replays_its_later_stretch() -> None:
    from forensics.replay.plan import make_plan, reachable
    from forensics.replay.runner import restorable

    data = _climb_run(30, 60, 68, 90)
    plan = reachable(data, make_plan(data, _climb_incident(), 20), lambda p: restorable(data, p))
    assert plan.offending == 83 and plan.end == 118  # the climb, up to its highest peak
    assert restore_checkpoint(data, plan).step == 68
    assert plan.note is not None and "from step 78" in plan.note and "step 8" in plan.note


def test_a_reachable_first_peak_or_a_forced_step_is_replayed_as_planned() -> None:
    from forensics.replay.plan import make_plan, reachable
    from forensics.replay.runner import restorable

    data = _climb_run(5, 30, 60)
    plan = reachable(data, make_plan(data, _climb_incident(), 20), lambda p: restorable(data, p))
    assert plan.offending == 8 and plan.note is None
    data = _climb_run(30, 60)  # --step 8: the user asked for that batch
    plan = reachable(
        data, make_plan(data, _climb_incident(step=8), 20), lambda p: restorable(data, p)
    )
    assert plan.offending == 8 and plan.note is None


def test_later_stretches_read_from_the_stored_peaks() -> None:
    import json

    from forensics.replay.context import later_stretches

    peaks = [
        {"step": 8, "value": 11.0, "from": 7, "back": 22},
        {"step": 83, "value": 7.5, "from": 78, "back": 219},
        {"step": 118, "value": 8.7, "from": 78, "back": 219},
        {"step": 250, "value": None, "from": 249, "back": None},  # a NaN peak
    ]
    assert later_stretches(json.dumps(peaks)) == [(78, 118), (249, 250)]
    assert later_stretches(None) == []

"""Every threshold detection uses, in one dataclass, each with the reason for its value.

The same values serve real and simulated runs; docs/detection.md explains them again for
users. Counts called `*_points` are logged points (rows of the series), counts called
`*_steps` are optimizer steps: a log written every 500 steps has one point per 500 steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class DetectConfig:
    # --- screen (screen.py) -----------------------------------------------------------
    # Trailing median of log-loss that a point is compared with. 21 points ignore a spike
    # of up to 10 points and still follow a loss that falls by a few % per 20 points.
    trend_points: int = 21
    # Trailing window of the robust noise scale (median absolute residual x 1.4826).
    scale_points: int = 201
    # A point is a candidate when its log-residual is at least `z_min` noise scales ...
    # Real runs: clean GPT-15B / DeepSeek proxy peak at 4.4; every documented spike >= 11.
    z_min: float = 8.0
    # ... and at least this log-ratio above the trend (0.14 = +15%). SOURCES calls a run
    # clean when no point jumps 15% above the rolling median; every documented spike in the
    # real logs is +30% or more; noise alone (heavy-tailed micro-batch losses) stays below.
    rise_min: float = 0.14
    # The point test measures against the lower of the trend and the median of this many
    # points before (screen.point_base): the level a fast-falling loss is at.
    recent_points: int = 3
    # The slow-rise screen compares a short trailing median (this many points) with the
    # lowest trend of the previous `level_lookback_points`: it catches a loss that creeps up
    # too slowly for the point screen (non-spike divergence).
    level_points: int = 5
    level_lookback_points: int = 200
    # A point far below the trend (`low`: >= rise_min and z_min sigmas under it, a batch of
    # degenerate, repeated text) is evidence of its own: in the `after_dip_points` points
    # after it the point test asks for after_dip_z x z_min sigmas (rise_min still applies).
    # The large gradient such a batch gives sets off a spike that is not always 8 sigma
    # above a noisy trend, and it is the pair, dip then spike, that tells data corruption.
    after_dip_points: int = 3
    after_dip_z: float = 0.6
    # Start-up is not screened: the first `burn_in_points` points and everything before the
    # loss has made `burn_in_descent` of its initial descent (in log space), where the loss
    # and the fp16 loss scale legitimately jump around. Kept small on purpose: the end of
    # warm-up (tr8-104B diverged there at loss 6.4 from 11) must be screened.
    burn_in_points: int = 20
    burn_in_descent: float = 0.1
    # ... except a point at least 2x the median of the 3 points before it (log 2): no
    # start-up descent or warm-up noise doubles the loss in one logged point, a garbage
    # batch does (a shard of random tokens puts the loss back near ln V).
    startup_jump: float = 0.693
    # ... or a point that stands out on both sides by rise_min and z_min start-up noise
    # scales: above the 3 points before it and above where the loss comes back to (a
    # 3-point median) within the next `startup_return_points` points (screen.startup_spikes),
    # and both tests go on after start-up while the trend lags the descent (screen.lag_end).
    # Not in the first `startup_steps` steps: Adam's first updates and the fp16 loss-scale
    # search jump around there (a tiny model at 4x its sane LR spikes +46% at step 7), nor
    # while a loss-scale search that began there goes on, where the log shows it.
    startup_return_points: int = 8
    startup_steps: int = 20
    # A short log (an excerpt pasted into an issue: 5-15 lines around the spike) cannot
    # spare 20 points of start-up: its burn-in shrinks to a quarter of its points, but never
    # below `short_history_points`. Incidents with fewer than `low_history_points` logged
    # points before their onset carry a `history_points` finding that says how little the
    # trend and the noise scale rest on.
    short_history_points: int = 5
    low_history_points: int = 50
    # --- warm-up rise (detector.warmup_rise) -------------------------------------------
    # A learning rate too high for the model often never spikes: while the logged LR is
    # still warming up, the loss stops falling and climbs back for tens of steps, and the
    # gradient norm climbs with it (a tiny model at 100x its sane LR sits at the unigram
    # loss; tr8-104B diverged as warm-up ended). Each point of that climb is too small
    # for the point screen (z_min) and the whole too small for the slow screen (+15%),
    # so the mechanism gets its own test, and only inside the first LR ramp: the 9-point
    # median loss rises from its lowest point of the warm-up by >= warmup_rise_min
    # (log-ratio: +10%) and >= warmup_rise_z noise scales (measured before the climb),
    # by half of warmup_rise_min already when the LR reaches its peak, and up to half a
    # warm-up after it,
    # while the grad norm grows >= warmup_rise_grad x over the same stretch (its median
    # near the top against near the low, or its co-movement with the loss through the
    # climb: detector._gradient_climbs).
    # Later bumps (llm.c's +9%, an SGDR restart, a seasonal schedule) are not in the
    # first ramp; a healthy warm-up's loss falls through it.
    warmup_rise_min: float = 0.095
    warmup_rise_z: float = 3.0
    warmup_rise_grad: float = 2.0
    # A warm-up this short (logged points from the end of start-up to the LR peak) holds
    # no climb to measure.
    warmup_rise_points: int = 20
    # --- typing (typing.py) -----------------------------------------------------------
    # Recovery window after the (last) peak. It is widened to `min_window_points` logged
    # points when the log is sparse, so that a log every 500 steps is judged on 5 points.
    recovery_window: int = 500
    min_window_points: int = 5
    # Back "within tolerance" of the extrapolated pre-spike trend: a point within
    # max(tolerance, 2 sigma) and the median of the next `smooth_points` within tolerance.
    # The tolerance is widened to two standard errors of that median so that noise alone
    # never types a recovered spike as lingering.
    tolerance: float = 0.03
    # Points in the forward median that decides "the loss is back" (an odd number).
    smooth_points: int = 9
    # Divergent: not recovered, and from the end of the recovery window to the end of the
    # run the smoothed loss never falls below (1 + far_excess) x the pre-spike level; or
    # the loss is non-finite for good.
    far_excess: float = 0.2
    # Steps of history the pre-spike trend is fitted on: max(this, pre_fraction x onset).
    pre_steps: int = 1000
    pre_fraction: float = 0.2
    # A step down of >= trend_step_min (relative, and 4 standard errors of 5-point medians)
    # in that history, held for >= trend_step_points points and trend_step_hold steps up to
    # the onset (an epoch boundary, an LR milestone; not a degenerate shard's dip just
    # before it), starts the fit after it: a power law across the step runs below the loss.
    trend_step_min: float = 0.03
    trend_step_points: int = 8
    trend_step_hold: int = 200
    # The trend is moved onto the median of this many points before the onset when it has
    # left them (typing._anchored).
    trend_anchor_points: int = 20
    # --- grouping ------------------------------------------------------------------------
    # A new excursion that starts within `echo_window` steps of a peak of an incident joins
    # it as one more peak (echo spikes of a stale second moment, a too-high LR's recurring
    # spikes), unless that incident was a blip already over: recovered before the new onset,
    # each peak one logged point (detector._healed_blip).
    echo_window: int = 100
    # --- events (events.py) -----------------------------------------------------------
    # A cluster of loss-scale halvings is an incident of its own from this many halvings
    # (8x): one halving with one skipped step is the scaler's normal probing every window.
    scale_halvings_min: int = 3
    # Events closer than this many steps (or 3 logged points) form one cluster.
    event_gap_steps: int = 50
    # --- gradient norm ------------------------------------------------------------------
    # A grad-norm point this many times its trailing median (and z_min noise scales) is a
    # gradient spike: attached to an incident, or a near-miss when the loss did not move.
    grad_spike_ratio: float = 3.0
    # A gradient this many times its median, at one step, is absurd: a hardware suspect that
    # forms an incident even with no loss spike.
    absurd_grad_ratio: float = 1000.0
    # A logged loss this many times the run's initial loss is absurd: a batch of random
    # tokens scores about ln V (the initial loss of a pre-training run), a model confidently
    # wrong on it about twice that, and a fine-tune starts near 1 or above; 30x is beyond any
    # batch of data, so the value itself was corrupted (features.transient_bad).
    absurd_loss_ratio: float = 30.0
    # ... or this many times ln V (features.uniform_loss), when lower: random tokens score
    # about ln V, a band the model learned to rule out 2-3 ln V (the simulator's rare band
    # 2.9); 5 ln V is no batch of text, while 30x a run's initial loss is 30 ln V from scratch.
    absurd_uniform_ratio: float = 5.0
    # Next to such a value (or a non-finite one), a loss this many times its trend is one too:
    # a writer averaging its logging window dilutes the bad step into it (x247 in a 14-step
    # window logs x18); no text batch scores 10x the model's own loss and is gone a step later.
    absurd_trend_ratio: float = 10.0
    # At most this many bad values within transient_span_steps (or 4 log intervals) that left
    # the loss around and between them on its trend are a transient fault (features.py).
    transient_max: int = 4
    transient_span_steps: int = 32
    # A one-point loss excursion whose gradient norm (logged every step) rises no more than
    # the gradient's own noise does in this fraction of the run's windows is a near-miss,
    # not an incident (quiet.py): a batch hard enough to lift the loss lifts its gradient
    # with it, while a heavy-tailed loss (Student-t micro-batch noise) can throw one +15%
    # point alone. The bar is the run's own gradient (heavy-tailed too), not a Gaussian one;
    # under noise the fraction is uniform, so this is the share of noise jumps kept.
    quiet_grad_chance: float = 0.001
    # ... and only when the loss is back within this many logged points of the jump: a noise
    # point and its AR echo fade in a few points, while a loss that stays up for tens of
    # steps moved the model, gradient or not (then the evidence speaks, not the noise).
    quiet_max_points: int = 10
    # --- features (features.py) ---------------------------------------------------------
    # History scanned for a slow drift of grad norm / parameter norm before the onset (at
    # most half the history before an early onset).
    precursor_steps: int = 400
    # A drift had begun before the last this many steps (at least 3 log intervals) before
    # the onset: a gradient that rose only within them jumped, as a kick does (a batch, a
    # stale second moment's first step, an overflow cascade the log does not show), it did
    # not drift as a too-high LR's does over hundreds of steps (features.grad_drift_early).
    drift_gap_steps: int = 40
    # Steps before the onset (at least one log interval) searched for the gradient jump that
    # set the incident off. A batch's gradient comes with its own loss, but a damaging
    # update's loss climbs for several steps after the jump (a stale second moment keeps
    # the updates large), so the threshold is crossed well after the gradient that caused it.
    grad_lookback: int = 10
    # Other loss excursions within this many steps of an incident count as recurrences.
    recurrence_steps: int = 2000
    # Points before the onset (up to the highest peak) searched for the abnormal batch of a
    # data-corruption incident.
    dip_lookback_points: int = 3
    # The loss of uniform guessing (random tokens), ln V: vocab_size from the config, else
    # the larger of the run's initial loss (a model trained from scratch starts at ln V) and
    # ln(min_vocab_size): common LLM tokenizers have 30k (BERT 30,522; Llama 32,000) to 256k
    # entries, and a fine-tune starts far below their level, so its initial loss is no such
    # level (features.uniform_source says which).
    min_vocab_size: int = 32000
    # A peak within this band of that loss and at least random_level_rise above its trend
    # (2x) is at the level of random tokens (features.random_level): a batch the model
    # cannot predict at all. A rare-token batch scores far below it late in a run (its
    # tokens are a small share of the batch) or far above it (a band the model learned to
    # rule out is confidently wrong); a loss already near it is early training.
    random_level_low: float = 0.8
    random_level_high: float = 1.2
    random_level_rise: float = 1.0
    # A divergence at the peak LR within this many warm-up lengths of the start is the
    # end of warm-up's (features.warmup_end_divergence); later, the run had held that LR.
    warmup_end_span: float = 6.0
    # Echoes whose last peak rose less than this share of the largest one's fade
    # (features.fading_train): one kick dying out, not an LR that keeps kicking harder.
    echo_fade_line: float = 0.75
    # A kick's own updates are spent this many steps after it (Adam's first moment keeps
    # 0.9^50 = 0.5%): spikes still growing later are not its echoes (features.late_growth).
    kick_reach_steps: int = 50
    # After the largest gradient, the gradient norm is read from this many steps on (past a
    # batch's own step and the next ones that still carry some of its gradient) over
    # afterglow_steps (at least 2 log intervals): a batch the optimizer damped leaves the
    # next batches' gradients where they were; amplified updates move the model, whose
    # gradients stay up while it returns (features.grad_afterglow).
    afterglow_skip: int = 3
    afterglow_steps: int = 20
    # --- classification (classify.py) ---------------------------------------------------
    # Below this confidence the cause is `unknown` and the rule is listed as a hypothesis.
    min_confidence: float = 0.5
    # --- recovery (recovery.py) ----------------------------------------------------------
    # Restart from a checkpoint at least this many steps before the onset, scaled down for
    # short runs to `checkpoint_gap_fraction` of the run.
    checkpoint_gap: int = 1000
    checkpoint_gap_fraction: float = 0.1
    # --- severity (recovery.py; docs/definitions.md) ------------------------------------
    # moderate: at least this many steps lost, or this fraction of the run, or GPU-hours;
    # major: lingering, or this fraction of the run, or GPU-hours; critical: divergent or
    # non-finite values. Below moderate an incident is minor (one line in the summary).
    moderate_steps: int = 50
    moderate_fraction: float = 0.01
    moderate_gpu_hours: float = 1.0
    # moderate too, whatever it cost: the peak at least (1 + this) x the pre-spike trend,
    # or a spike at the same step in at least this many other runs of the store
    moderate_rise: float = 1.0
    moderate_cross_runs: int = 2
    major_fraction: float = 0.1
    major_gpu_hours: float = 100.0

    def with_overrides(self, **changes: Any) -> DetectConfig:
        """A copy with the given fields changed; None values are ignored (CLI defaults)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

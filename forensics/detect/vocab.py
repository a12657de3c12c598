"""The names a cause rule may use, and what each means: the incident types, the incident
features and the evidence sources a rule may `need`.

Plain data with no numpy or polars, so that reading and validating the rules
(`forensics rules list`, `rules lint`) starts instantly; the modules that compute these
(typing.py, features.py, data.py) import them from here.
"""

from __future__ import annotations

RECOVERABLE, LINGERING, DIVERGENT = "recoverable", "lingering", "divergent"
TYPES = (RECOVERABLE, LINGERING, DIVERGENT)
TYPE_NUMBER = {RECOVERABLE: 1, LINGERING: 2, DIVERGENT: 3}

FEATURES: dict[str, str] = {
    # loss shape
    "rise": "peak loss / pre-spike trend at the peak - 1 (inf when the peak is non-finite)",
    "rise_steps": "steps from the onset to the (first) peak",
    "n_peaks": "number of loss peaks merged into the incident (echo spikes included)",
    "echo_count": "n_peaks - 1: further peaks that came before the loss had recovered",
    "first_echo_gap": "steps between the first and the second peak (None with one peak)",
    "echo_fade": "rise (log, against the trend) of the last finite peak / that of the largest "
    "(None with fewer than two finite peaks): 1 when the spikes grow to the last, below 1 when "
    "they fade after the largest",
    "jump_share": "share of the rise reached at the onset point (1 = the loss jumped at once)",
    "single_point": "1 when the excursion is one logged point and the next point is back "
    "near the trend, else 0",
    "single_point_peaks": "share of the incident's peaks that are one logged point with the "
    "next point back near the trend (1: every peak is one batch's own loss)",
    "next_excess": "loss at the first logged point after the peak / trend - 1 (how much of a "
    "spike follows the peak point)",
    "peak_drop": "share of the rise lost at the first logged point after the peak (1 = back "
    "at once, as after one batch whose own loss was high)",
    "heal_share": "share of the rise gone at the lower of the two logged points after the "
    "peak (a batch's own loss leaves with it; a rise the next batches still carry is the "
    "model's state)",
    "pre_dip": "lowest loss / trend - 1 from dip_lookback_points points before the onset to "
    "the highest peak (negative: a batch far below trend before the spike)",
    "pre_dip_z": "pre_dip in noise units (log residual / robust sigma)",
    "plateau_points": "consecutive logged points at 85% or more of a one-peak rise (log: a "
    "flat top) from its first such point (None with several peaks)",
    "plateau_edges": "logged points taken to step up to that plateau from under 25% of the "
    "rise, or down from it to under 25%, whichever is more (None when it never came back)",
    "plateau_exit": "share of the rise (log) lost from the plateau's last point to the next "
    "logged point",
    "flat_top": "1 when plateau_points >= 2 and the top was entered and left within 2 logged "
    "points each way, or plateau_points >= 3 and it was left by a step of >= 30% of the rise "
    "in one point (the bad batches ended while the damage they did decays); 0 otherwise, "
    "None with several peaks",
    "peak_vs_initial": "peak loss / the run's initial loss (median of the first 5 points); "
    "about 1 for a batch the model cannot predict at all",
    "peak_vs_uniform": "peak loss / ln V, the loss of uniform predictions: ln(vocab_size) "
    "from the config, else the larger of the run's initial loss and ln(min_vocab_size) "
    "(32000: a fine-tune starts far below any common tokenizer's ln V, so its initial loss "
    "is no such level); 0.75 or more for a batch the model cannot predict at all",
    "uniform_loss": "that ln V, in nats",
    "uniform_source": "where that ln V comes from: config (vocab_size) or estimate (the "
    "initial loss or ln 32000)",
    "warmup_climb": "1 when the incident holds a warm-up climb (detector.warmup_rise): the "
    "9-point median loss back up by warmup_rise_min and 3 noise scales from its warm-up low "
    "while the logged LR still ramps, the grad norm climbing 2x with it; 0 otherwise",
    "warmup_end_divergence": "1 when the incident diverged at 90% or more of its peak LR "
    "within 6 warm-up lengths of the start (the end of warm-up), 0 otherwise (or when it did "
    "not diverge), missing when the LR phase or warm-up length is unknown",
    "fading_train": "1 when the echoes fade (echo_fade under 0.75) while the LR held (90% or "
    "more of its peak at the onset and at the highest peak) and the incident did not "
    "diverge, 0 otherwise, missing when such a train's LR is unknown",
    "late_growth": "1 when the spikes grow to the last (an echo, echo_fade 0.75 or more) "
    "through two echoes at least (the top is the third peak or later), short of diverging, "
    "the LR at its peak (90% or more of it at the onset or at the highest peak), and no one "
    "kick explains them: the loss top comes more than max(50, 5 log intervals) steps after "
    "the largest grad norm, or that grad norm came after the first peak; 0 otherwise, "
    "missing when the grad norm or such a train's LR is unknown",
    "batch_train": "1 when the incident has echoes, its first peak rose in one logged step "
    "and its largest gave back half its rise or more within two points (heal_share >= 0.5), "
    "the loss logged every step, and it did not diverge: a train of batches, each its own "
    "spike; 0 otherwise, missing when the loss is logged every few steps",
    "random_level": "1 when the peak is at the loss of random tokens: 0.8-1.2 x ln V and at "
    "least 2x its trend (rise >= 1); 0 otherwise, None when ln V is not known",
    "settle_excess": "loss level after the spike / extrapolated trend - 1: at recovery for a "
    "recoverable incident, the settled level otherwise",
    "recovery_steps": "steps from the last peak to recovery (None when not recovered)",
    "type": "recoverable, lingering or divergent (see Types)",
    "window_closed": "1 when the run went on past the end of the recovery window, else 0",
    "nonfinite_loss": "non-finite loss points from the onset to the end of the incident",
    "nonfinite_grad": "non-finite grad-norm points from the onset to the end of the incident",
    "isolated_nonfinite": "1 when exactly one non-finite or absurd value is seen, the "
    "points on both sides are finite and near the trend, and no finite loss peak of the "
    "incident lies beyond them, else 0",
    "transient_bad": "bad values (non-finite loss or grad norm, absurd grad norm, a loss "
    "at absurd_loss_ratio x the initial loss or absurd_uniform_ratio x ln V, whichever is "
    "lower, or more; beside one of them, a loss "
    "absurd_trend_ratio x the trend or more) the incident and the 3 points past it hold "
    "when they are 1 to transient_max within a short span and every other logged loss "
    "around and between them stays under the trend's spike band, back on the trend or "
    "under it (or at the level of the point before them) after (the values were "
    "corrupted, not the model, which they would have left higher), "
    "else 0",
    "origin": "loss (a loss excursion) or events (non-finite values or scaler events only)",
    # gradient
    "grad_ratio": "largest grad norm from max(grad_lookback, log_interval) steps before the "
    "onset to the last peak / median grad norm over the precursor window before the onset "
    "(inf when non-finite)",
    "grad_lead": "step where the loss first reaches 80% of its rise - step of that largest grad "
    "norm (>0: the gradient came first)",
    "grad_afterglow": "median grad norm over the logged points from 3 steps after that "
    "largest grad norm, over max(20 steps, 2 log intervals) / the precursor's median: the "
    "model's own gradient after the kick (amplified updates moved it), not the batch's",
    "grad_drift": "median grad norm over the last quarter of the precursor window (at least "
    "16 log intervals, as far back as the log goes) / the lowest median of its four quarters "
    "(a slow rise before the onset, or before the first overflow of a cascade that began "
    "before the onset: the cascade's gradient is its own)",
    "grad_drift_early": "grad_drift over a window as long, ending max(40, 3 log intervals) "
    "steps earlier: the drift that was there before the last few intervals (a slow rise), "
    "not a jump just before the spike",
    "overflows": "non-finite grad-norm points with a finite loss from max(50, 5 log "
    "intervals) steps before the onset to the first peak: skipped steps, as an fp16 loss "
    "scaler skips an overflow (HF, Lightning and Megatron log their grad norm as inf/nan)",
    "overflow_lead": "onset step - the first of those points (>= 0: the overflows came "
    "first; None when there is none)",
    "param_drift": "relative growth of the parameter norm over the precursor window minus "
    "its growth over the window before it",
    "update_ratio": "largest update norm in the incident / median over the precursor window",
    "grad_clip": "gradient clipping threshold from the config",
    # optimizer and schedule
    "beta2": "Adam beta2 from the config",
    "beta2_eff": "beta2 implied by the decay of adam_v_mean after its jump: exp(slope per step "
    "of log(v - v's pre-onset trend))",
    "v_jump": "largest ratio of adam_v_mean in the incident to its trend (a straight line in "
    "log v over the quarter precursor window before the onset)",
    "lr_frac": "learning rate at the onset / peak learning rate (config peak_lr, else the "
    "largest logged, unless the log ends while the LR still climbs to it); when the LR is "
    "not logged, from the config's schedule (lr_schedule, warmup_steps, total_steps: "
    "detect/schedule.py)",
    "lr_frac_peak": "learning rate at the (highest) peak / peak learning rate: a loss that "
    "climbed for tens of steps while the warm-up ended peaked under the top LR",
    "lr_source": "where lr_frac comes from: log (the logged LR) or config (the schedule the "
    "config implies: lr_schedule cosine, linear, constant, wsd, inverse_sqrt, polynomial or "
    "sqrt_annealing with warmup_steps and total_steps or lr_decay_steps); None when neither",
    "warmup_progress": "onset step / end of warm-up (config warmup_steps, else the first step "
    "where the logged LR reaches 98% of its peak, unless the log ends while the LR still "
    "climbs to it)",
    "lr_phase": "warmup, peak or decay: where the onset sits in the LR schedule (logged LR "
    "where it covers the onset: three points or more, the onset within two of their "
    "intervals of the last; else the config's warmup_steps / peak_lr); None when neither "
    "is known",
    "recurrence": "other loss excursions of the run within recurrence_steps of the onset",
    "spikes_in_run": "loss excursions in the whole run",
    "lr_vs_earlier_lr_too_high": "learning rate at the onset / the highest learning rate at "
    "the onset of an earlier incident of the run attributed to lr_too_high whose last peak "
    "is within recurrence_steps (None when there is none, or the LR is not logged)",
    # fp16
    "precision": "fp16, bf16 or fp32 from the config (None when unknown)",
    "scale_halvings": "halvings of the fp16 loss scale from shortly before the onset to the "
    "end of the incident, or to where its loss went non-finite for good (that step "
    "included): the scaler halves at every step after it, a reaction to a loss already gone; "
    "a halving at a NaN/Inf or absurd loss, or in a log interval whose NaN iterations the "
    "trainer counted (or at the next logged point), is that bad value's reaction too, not "
    "counted",
    "scale_drop": "largest / smallest loss scale over the same span (1 = unchanged)",
    "skipped": "skipped iterations (and scaler overflow reports) over the same span, less "
    "the NaN iterations counted with them: a step whose loss was NaN is no overflow's skip",
    "nan_iters": "NaN iterations counted by the trainer over the same span",
    "log_interval": "median steps between logged loss points around the onset (10 gaps either "
    "side): the spacing the incident was logged at, which a run may change midway",
    # across runs of one store (recurrence.py; None when the store holds no other run)
    "cross_runs": "other runs of the store with a loss spike at the same step (or the same "
    "tokens consumed) as one of this incident's peaks",
    "rollback_recurrence": "attempts the run went back from (a resume that logged the steps "
    "again) that spiked at this step too; missing when no attempt logged it",
    "cross_runs_covering": "other runs of the store whose loss log covers this incident's "
    "peak step",
}

# What a rule may `need` to be evaluated (rules/*.yaml `needs`), and what to tell the user
# to log when it is missing: metrics, config values and the batches' token ids.
EVIDENCE_SOURCES: dict[str, str] = {
    "grad_norm": "the pre-clip gradient norm",
    "grad_norm_every_step": "the pre-clip gradient norm every step (a batch's gradient lasts "
    "one step)",
    "lr": "the learning rate every step (or warmup_steps and the peak LR in the config)",
    "adam_v_mean": "Adam's second-moment mean (exp_avg_sq) every step",
    "beta2": "Adam's beta2 in the run config",
    "param_norm": "the parameter norm every step",
    "update_norm": "the update norm every step",
    "loss_scale": "the fp16 loss scale every step",
    "skipped_iters": "skipped iterations / overflow events",
    "precision": "the training precision (fp16, bf16) in the run config",
    "batch_tokens": "the token ids of each step's batch (a batch manifest), for replay",
}

"""What the recorder costs: step time of the bundled model with and without it.

    python bench/record_overhead.py                 # tiny preset on CPU (1 thread)
    python bench/record_overhead.py --steps 400 --rounds 5
    python bench/record_overhead.py --device cuda --preset small   # when a GPU is there

One plain PyTorch loop (forward, backward, clip, AdamW) of the bundled model. Each round runs
it three times: without the recorder, with `Recorder` at its default settings (log_every=20,
stats_every=10, layers_every=100), and without it again, in an order that rotates from round
to round, so that load from other processes hits both alike. Each run times `--steps` steps
after a warm-up. The figure to read on a shared machine is the process's CPU time (other
processes cannot inflate it): the ratio with/without per round, against the mean of that
round's two runs without, and its median over rounds. The two runs without against each
other give the noise floor of the same measurement. The loop hands `clip_grad_norm_`'s return
(the pre-clip norm) to `after_backward`, as docs/recorder.md recommends; `--measure-norm` lets
the recorder compute it. `--stats-every 1` shows the cost of per-step optimizer statistics.
`--batch-size 32` gives 2,048 tokens per step. The recorder's files go to a temporary folder.
Goal: <= 2 % slower at the defaults.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from forensics.record import Recorder
from forensics.sim.data import prepare_data, read_batch
from forensics.sim.model import preset
from forensics.sim.trainer import TrainConfig, build_state, lr_at, sampled_batches


def run_round(
    cfg: TrainConfig,
    run_dir: Path,
    steps: int,
    warmup: int,
    rec_kw: dict | None,
    reuse_norm: bool = True,
) -> tuple[float, float, float]:
    """(wall seconds per step, CPU seconds inside the recorder's calls, CPU seconds per step) over
    `steps` steps after `warmup`; the recorder is on when rec_kw is given."""
    state = build_state(cfg, run_dir)
    model, opt, device = state.model, state.optimizer, state.device
    batches = sampled_batches(cfg, cfg.data_tokens)
    rec = Recorder(run_dir / "rec", model=model, **rec_kw) if rec_kw is not None else None
    params = [p for p in model.parameters()]
    t0, c0, inside = 0.0, 0.0, 0.0
    for step in range(1, warmup + steps + 1):
        if step == warmup + 1:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0, c0 = time.perf_counter(), time.process_time()
        (record,) = batches(step)
        x, y = read_batch(run_dir, record)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        assert loss is not None
        loss.backward()
        if rec is not None and not reuse_norm:  # the recorder measures the norm itself
            t_in = time.process_time()
            rec.after_backward(model)
            inside += time.process_time() - t_in if step > warmup else 0.0
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)  # returns the pre-clip norm
        if rec is not None and reuse_norm:  # docs/recorder.md: hand it over, no second pass
            t_in = time.process_time()
            rec.after_backward(model, grad_norm=norm)
            inside += time.process_time() - t_in if step > warmup else 0.0
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        opt.step()
        if rec is not None:
            t_in = time.process_time()
            fed = {"input_ids": x, "source": record.source, "token_offset": record.token_offset}
            rec.after_step(model, opt, loss, batch=fed)
            inside += time.process_time() - t_in if step > warmup else 0.0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if rec is not None:
        rec.close()
    return elapsed / steps, inside / steps, cpu / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--stats-every", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=0, help="sequences per step (0: preset's)")
    ap.add_argument(
        "--measure-norm",
        action="store_true",
        help="let the recorder compute the grad norm (default: reuse clip_grad_norm_'s)",
    )
    args = ap.parse_args()
    model = preset(args.preset)
    big = args.preset != "tiny"
    cfg = TrainConfig(model=model, preset=args.preset, device=args.device,
                      seq_len=model.block_size, batch_size=args.batch_size or (16 if big else 8),
                      data_tokens=1 << 22 if big else 65536, total_steps=100_000)  # fmt: skip
    rec_kw = {"stats_every": args.stats_every}
    reuse = not args.measure_norm
    wall: dict[str, list[float]] = {"A": [], "B": [], "A2": []}
    cpu: dict[str, list[float]] = {"A": [], "B": [], "A2": []}
    inside: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        prepare_data(run_dir, model.vocab_size, cfg.data_tokens, cfg.data_seed)
        for r in range(args.rounds):
            # A: without, B: with, A2: without again (the A/A pair is the noise floor);
            # the order rotates so that neither variant always runs first.
            order = [("A", None), ("B", rec_kw), ("A2", None)]
            order = order[r % 3 :] + order[: r % 3]
            for name, kw in order:
                total, own, c = run_round(cfg, run_dir, args.steps, args.warmup, kw, reuse)
                wall[name].append(total)
                cpu[name].append(c)
                if kw is not None:
                    inside.append(own)
    print(
        f"device {args.device}, preset {args.preset}, {cfg.batch_size}x{cfg.seq_len} tokens/step, "
        f"{args.rounds} rounds x {args.steps} steps, torch threads {torch.get_num_threads()}, "
        f"recorder (stats_every={args.stats_every}, log_every=20, layers_every=100, grad norm "
        f"{'measured by the recorder' if args.measure_norm else 'from clip_grad_norm_'})"
    )
    for name, label in (("A", "without"), ("B", "with"), ("A2", "without, again")):
        print(
            f"  {label:15s} CPU {statistics.median(cpu[name]) * 1e3:7.3f} ms/step, wall "
            f"{statistics.median(wall[name]) * 1e3:7.3f} ms/step (median of rounds)"
        )
    _ratio_line("with / without (CPU time)", cpu["B"], cpu["A"], cpu["A2"])
    _ratio_line("noise: without again / without (CPU)", cpu["A2"], cpu["A"], None)
    _ratio_line("with / without (wall clock)", wall["B"], wall["A"], wall["A2"])
    own, base = statistics.median(inside), statistics.median(cpu["A"] + cpu["A2"])
    print(
        f"  CPU time inside the recorder's calls: {own * 1e3:.3f} ms/step = "
        f"{own / base * 100:.2f} % of a step's CPU time without it (goal <= 2 %)"
    )


def _ratio_line(label: str, top: list[float], a: list[float], a2: list[float] | None) -> None:
    """Per-round ratios against the same round's reference (the mean of its two without-runs
    when both are given): median and the spread of the middle half."""
    refs = [(x + y) / 2 for x, y in zip(a, a2, strict=True)] if a2 is not None else a
    ratios = sorted(t / r for t, r in zip(top, refs, strict=True))
    q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    med = statistics.median(ratios)
    print(
        f"  {label:38s} {med:.4f} ({(med - 1) * 100:+.2f} %), middle half of rounds "
        f"{(q1 - 1) * 100:+.2f} .. {(q3 - 1) * 100:+.2f} %"
    )


if __name__ == "__main__":
    main()

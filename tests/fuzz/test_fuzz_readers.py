"""Property-based fuzzing of every structured reader (issue 14).

Valid files with random content are written through the real writers (json, csv, polars,
TensorBoard's SummaryWriter, torch.save) and then, per example, left alone or corrupted:
truncated at a random offset, bytes flipped, NaN/Inf spellings injected, steps duplicated
and shuffled. The invariant: a correct read (values round-trip, NaN/Inf kept, a repeated
step keeps its last value) or one ForensicsError; never another exception, never a silent
change (a truncated file yields only values that were written), never a hang (each
example runs under an alarm).

Fixed seed (derandomize). FORENSICS_FUZZ_EXAMPLES sets examples per reader: small by
default so the suite takes seconds in CI; `python bench/fuzz_long.py` runs 10,000.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.errors import ForensicsError
from forensics.ingest import batches, checkpoints
from forensics.ingest.base import ReadResult, get_reader
from forensics.ingest.pipeline import _drop_repeated_steps

EXAMPLES = int(os.environ.get("FORENSICS_FUZZ_EXAMPLES", "30"))
TIMEOUT_S = int(os.environ.get("FORENSICS_FUZZ_TIMEOUT", "20"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
COUNTS: dict[str, dict[str, int]] = {}  # reader -> outcome -> examples (bench/fuzz_long.py)

Table = dict[str, list[float | None]]  # metric -> value per row (None: not logged)
CORRUPTIONS = ["none", "truncate", "flip", "nan_spellings", "dup_shuffle"]
NAN_SPELLINGS = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "-inf": -math.inf,
                 "Infinity": math.inf, "-Infinity": -math.inf}  # fmt: skip

values = st.floats(allow_nan=True, allow_infinity=True, width=64)
names = st.sampled_from(["loss", "grad_norm", "lr", "train/loss", "eval_loss", "m_1", "x y"])


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[int], Table]:
    steps = sorted(draw(st.sets(st.integers(-5, 10**6), min_size=1, max_size=25)))
    metrics = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    cols = {m: draw(st.lists(st.one_of(st.none(), values), min_size=len(steps),
                             max_size=len(steps))) for m in metrics}  # fmt: skip
    return steps, cols


class Hang(Exception):
    pass


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def fire(*_: object) -> None:
        raise Hang(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _count(reader: str, outcome: str) -> None:
    COUNTS.setdefault(reader, {}).setdefault(outcome, 0)
    COUNTS[reader][outcome] += 1
    out = os.environ.get("FORENSICS_FUZZ_COUNTS")  # bench/fuzz_long.py keeps the tally
    if out:
        Path(out).write_text(json.dumps(COUNTS, indent=1, sort_keys=True))


def _expected(steps: list[int], cols: Table) -> dict[tuple[int, str], float]:
    return {(s, m): v for m, vs in cols.items() for s, v in zip(steps, vs, strict=True)
            if v is not None}  # fmt: skip


def _same(a: float, b: float, f32: bool = False) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if f32 and math.isfinite(b):
        try:
            b = struct.unpack("f", struct.pack("f", b))[0]
        except OverflowError:
            b = math.copysign(math.inf, b)
    return a == b


def _got(result: ReadResult) -> dict[tuple[int, str], float]:
    long = result.metrics
    return {(s, n): v for s, n, v in long.select("step", "raw_name", "value").iter_rows()}


def _corrupt(path: Path, how: str, rnd: random.Random) -> None:
    data = path.read_bytes()
    if how == "truncate" and data:
        path.write_bytes(data[: rnd.randrange(len(data))])
    elif how == "flip" and data:
        buf = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
        path.write_bytes(bytes(buf))


def _check(
    reader: str,
    how: str,
    read: Callable[[], ReadResult],
    expected: dict[tuple[int, str], float] | None,
    f32: bool = False,
) -> None:
    """The invariant, for one example."""
    try:
        with alarm(TIMEOUT_S):
            result = read()
            _drop_repeated_steps(result)
            got = _got(result)
    except ForensicsError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 320, str(exc)
        _count(reader, "error")
        return
    if expected is None:  # flipped bytes: any read is fine, but it must be a clean one
        _count(reader, "read")
        return
    if how == "truncate":  # only values that were written, none invented by a cut
        bad = {k: v for k, v in got.items() if k not in expected or not _same(v, expected[k], f32)}
        assert not bad, (how, bad)
        _count(reader, "read_prefix" if len(got) < len(expected) else "read")
        return
    assert set(got) == set(expected), (how, set(got) ^ set(expected))
    bad = {k: (got[k], expected[k]) for k in got if not _same(got[k], expected[k], f32)}
    assert not bad, (how, bad)
    _count(reader, "read")


def _rows(
    steps: list[int], cols: Table, how: str, rnd: random.Random
) -> tuple[list[int], list[int]]:
    """Row order to write and the expected winner per step (dup_shuffle: the last copy)."""
    order = list(range(len(steps)))
    if how == "dup_shuffle":
        order += [rnd.randrange(len(steps)) for _ in range(rnd.randint(1, 3))]
    return order, order


def _spell(v: float | None, how: str, rnd: random.Random) -> Any:
    if v is None or how != "nan_spellings" or math.isfinite(v):
        return v
    pool = [s for s, x in NAN_SPELLINGS.items() if _same(x, v)]
    return rnd.choice(pool)


# ----- writers ------------------------------------------------------------------------------


def _write_jsonl(path: Path, steps: list[int], cols: Table, order: list[int], how: str,
                 rnd: random.Random) -> None:  # fmt: skip
    with open(path, "w") as fh:
        for i in order:
            rec: dict[str, Any] = {"step": steps[i]}
            for m, vs in cols.items():
                if vs[i] is not None:
                    rec[m] = _spell(vs[i], how, rnd)
            fh.write(json.dumps(rec) + "\n")


def _write_csv(path: Path, steps: list[int], cols: Table, order: list[int], how: str,
               rnd: random.Random) -> None:  # fmt: skip
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", *cols])
        for i in order:
            cells = [("" if vs[i] is None else _spell(vs[i], how, rnd) if how == "nan_spellings"
                      else repr(vs[i])) for vs in cols.values()]  # fmt: skip
            w.writerow([steps[i], *[repr(c) if isinstance(c, float) else c for c in cells]])


def _expected_after(
    steps: list[int], cols: Table, order: list[int]
) -> dict[tuple[int, str], float]:
    """Last written row of each step wins; a metric absent from that row keeps its last value."""
    out: dict[tuple[int, str], float] = {}
    for i in order:
        for m, vs in cols.items():
            if vs[i] is not None:
                out[(steps[i], m)] = vs[i]  # type: ignore[assignment]
    return out


def _example(data: st.DataObject) -> tuple[list[int], Table, str, random.Random]:
    steps, cols = data.draw(tables())
    how = data.draw(st.sampled_from(CORRUPTIONS))
    return steps, cols, how, random.Random(data.draw(st.integers(0, 2**32)))


@FUZZ
@given(data=st.data())
def test_fuzz_jsonl(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    steps, cols, how, rnd = _example(data)
    path = tmp_path_factory.mktemp("jsonl") / "metrics.jsonl"
    order, _ = _rows(steps, cols, how, rnd)
    _write_jsonl(path, steps, cols, order, how, rnd)
    _corrupt(path, how, rnd)
    expected = None if how == "flip" else _expected_after(steps, cols, order)
    _check("jsonl", how, lambda: get_reader("jsonl").read(path), expected)


@FUZZ
@given(data=st.data())
def test_fuzz_csv(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    steps, cols, how, rnd = _example(data)
    path = tmp_path_factory.mktemp("csv") / "log.csv"
    order, _ = _rows(steps, cols, how, rnd)
    _write_csv(path, steps, cols, order, how, rnd)
    _corrupt(path, how, rnd)
    expected = None if how == "flip" else _expected_after(steps, cols, order)
    _check("table-csv", how, lambda: get_reader("table").read(path), expected)


@FUZZ
@given(data=st.data())
def test_fuzz_parquet(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    steps, cols, how, rnd = _example(data)
    path = tmp_path_factory.mktemp("pq") / "log.parquet"
    order, _ = _rows(steps, cols, how, rnd)
    frame = pl.DataFrame({"step": [steps[i] for i in order],
                          **{m: [vs[i] for i in order] for m, vs in cols.items()}},
                         schema={"step": pl.Int64, **{m: pl.Float64 for m in cols}})  # fmt: skip
    frame.write_parquet(path)
    _corrupt(path, how, rnd)
    expected = None if how in ("flip", "truncate") else _expected_after(steps, cols, order)
    _check("table-parquet", how, lambda: get_reader("table").read(path), expected)


@FUZZ
@given(data=st.data())
def test_fuzz_trainer_state(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    steps, cols, how, rnd = _example(data)
    steps = [abs(s) for s in steps]
    path = tmp_path_factory.mktemp("hf") / "trainer_state.json"
    order, _ = _rows(steps, cols, how, rnd)
    cols = {m.replace("eval_loss", "eval_x"): vs for m, vs in cols.items()}
    history = [{"step": steps[i], **{m: _spell(vs[i], how, rnd) for m, vs in cols.items()
                                       if vs[i] is not None}} for i in order]  # fmt: skip
    path.write_text(json.dumps({"global_step": max(steps), "log_history": history}))
    _corrupt(path, how, rnd)
    expected = None if how in ("flip", "truncate") else _expected_after(steps, cols, order)
    _check("hf_trainer", how, lambda: get_reader("hf_trainer").read(path), expected)


@FUZZ
@given(data=st.data())
def test_fuzz_tensorboard(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    from torch.utils.tensorboard import SummaryWriter

    steps, cols, how, rnd = _example(data)
    steps = [abs(s) for s in steps]
    folder = tmp_path_factory.mktemp("tb")
    order, _ = _rows(steps, cols, how, rnd)
    with SummaryWriter(str(folder)) as w:
        for i in order:
            for m, vs in cols.items():
                if vs[i] is not None:
                    w.add_scalar(m.replace(" ", "_"), vs[i], steps[i])
    (path,) = folder.glob("events.out.tfevents.*")
    _corrupt(path, how, rnd)
    cols = {m.replace(" ", "_"): vs for m, vs in cols.items()}
    expected = None if how in ("flip", "truncate") else _expected_after(steps, cols, order)
    _check("tensorboard", how, lambda: get_reader("tensorboard").read(path), expected, f32=True)


@FUZZ
@given(data=st.data())
def test_fuzz_torch_checkpoint(tmp_path_factory: pytest.TempPathFactory,
                               data: st.DataObject) -> None:  # fmt: skip
    import torch

    steps, cols, how, rnd = _example(data)
    path = tmp_path_factory.mktemp("ckpt") / f"ckpt_{abs(steps[-1])}.pt"
    tensors = {m: torch.tensor([v if v is not None else 0.0 for v in vs]) for m, vs in cols.items()}
    torch.save({"model": tensors, "step": abs(steps[-1])}, path)
    _corrupt(path, how if how in ("truncate", "flip") else "none", rnd)
    try:
        with alarm(TIMEOUT_S):
            idx = checkpoints.index_checkpoint(path)
    except ForensicsError as exc:
        assert "\n" not in str(exc), str(exc)
        _count("checkpoint", "error")
        return
    if how not in ("truncate", "flip"):
        assert idx.row["step"] == abs(steps[-1])
        assert sorted(idx.stats["param"].to_list()) == sorted(cols)
    _count("checkpoint", "read")


@FUZZ
@given(data=st.data())
def test_fuzz_manifest(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    steps, _, how, rnd = _example(data)
    folder = tmp_path_factory.mktemp("man")
    big = st.one_of(st.integers(0, 10**6), st.floats(), st.integers(-(2**70), 2**70), st.text())
    recs = [{"step": abs(s), "source": "data/train.bin", "token_offset": data.draw(big),
             "n_tokens": data.draw(big)} for s in steps]  # fmt: skip
    path = folder / "batches.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    _corrupt(path, how if how in ("truncate", "flip") else "none", rnd)
    try:
        with alarm(TIMEOUT_S):
            frame = batches.read_manifest(path, folder)
    except ForensicsError as exc:
        assert "\n" not in str(exc), str(exc)
        _count("manifest", "error")
        return
    assert frame["token_offset"].drop_nulls().min() >= 0  # type: ignore[operator]
    _count("manifest", "read")

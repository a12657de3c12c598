"""TensorBoard reader: event files written here by real writers are read back exactly.

Writers: torch's SummaryWriter (legacy simple_value and new_style tensor scalars) and
TensorBoard's own protos + record writer (TF2-style tensor_content, metadata only on a tag's
first event, several values per event, half tensors, text). Enough steps are written for
every decoding tier (templates, columns, per record) to see records.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.readers.tensorboard import TensorBoardReader, read_event_file
from forensics.store import open_store

READER = TensorBoardReader()
WALL0 = 1_700_000_000.0
TF2_TAGS = [("tf2/loss", 1), ("tf2/dbl", 2)]
SPECIAL = [math.nan, math.inf, -math.inf]


def _loss(step: int) -> float:
    """Ordinary values with NaN/+Inf/-Inf sprinkled in."""
    return SPECIAL[step % 3] if step % 97 == 5 else 3.0 / (1 + step) + 0.25


def _summary_writer(folder: Path, steps: list[int]) -> dict[str, list[tuple[int, float, float]]]:
    """Write three tags with torch's SummaryWriter; return what was written per tag."""
    from torch.utils.tensorboard import SummaryWriter

    written: dict[str, list[tuple[int, float, float]]] = {"loss": [], "lr": [], "lr64": []}
    writer = SummaryWriter(str(folder))
    for i, step in enumerate(steps):
        wall = WALL0 + i * 0.5
        loss, lr = _loss(step), 1e-3 * (1 + step % 7)
        writer.add_scalar("loss", loss, step, walltime=wall)
        writer.add_scalar("lr", lr, step, walltime=wall, new_style=True)
        writer.add_scalar("lr64", lr, step, walltime=wall, new_style=True, double_precision=True)
        written["loss"].append((step, float(np.float32(loss)), wall))
        written["lr"].append((step, float(np.float32(lr)), wall))
        written["lr64"].append((step, lr, wall))
    writer.close()
    return written


def _rows(frame: pl.DataFrame, name: str) -> list[tuple[int, float, float]]:
    sub = frame.filter(pl.col("raw_name") == name)
    return list(zip(sub["step"], sub["value"], sub["wall_time"], strict=True))


def _same(got: list[tuple[int, float, float]], want: list[tuple[int, float, float]]) -> bool:
    """Equal, NaN equal to NaN."""
    return len(got) == len(want) and all(
        g[0] == w[0] and g[2] == w[2] and (g[1] == w[1] or (math.isnan(g[1]) and math.isnan(w[1])))
        for g, w in zip(got, want, strict=True)
    )


def _event_file(folder: Path) -> Path:
    return next(folder.glob("events.out.tfevents.*"))


def test_summary_writer_scalars_read_back_exactly(tmp_path: Path) -> None:
    steps = [*range(300), 20_000, 3_000_000, 2**40]  # 1-, 2-, 3-, 4- and 6-byte step varints
    written = _summary_writer(tmp_path / "run", steps)
    path = _event_file(tmp_path / "run")
    assert READER.sniff(path, "")
    result = READER.read(path)
    assert result.warnings == []
    for tag, want in written.items():
        assert _same(_rows(result.metrics, tag), want), tag
    assert result.metrics.filter(pl.col("value").is_nan()).height > 0
    assert result.metrics.filter(pl.col("value") == -math.inf).height > 0


def test_split_and_add_scalars_subfolders_prefix_names(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    for split, value in (("train", 1.0), ("eval", 2.0)):
        writer = SummaryWriter(str(run / split))
        writer.add_scalar("loss", value, 10, walltime=WALL0)
        writer.close()
    writer = SummaryWriter(str(run / "logs"))
    writer.add_scalars("norm", {"a": 3.0, "b": 4.0}, 10, walltime=WALL0)
    writer.close()
    assert READER.sniff(run, "")
    frame = READER.read(run).metrics.sort("raw_name")
    assert frame["raw_name"].to_list() == ["eval/loss", "norm/a", "norm/b", "train/loss"]
    assert frame["value"].to_list() == [2.0, 3.0, 4.0, 1.0]
    (run / "config.json").write_text("{}")
    assert not READER.sniff(run, ""), "a run folder with other files is walked file by file"
    single = read_event_file(_event_file(run / "eval")).metrics
    assert single["raw_name"].to_list() == ["eval/loss"]


# ----- TensorBoard's own protos -------------------------------------------------------------
def _tensor_value(tag: str, tensor: tensor_pb2.TensorProto, plugin: str | None):
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if plugin:
        value.metadata.plugin_data.plugin_name = plugin
    return value


def _scalar_tensor(value: float, dtype: int, content: bool) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto()
    if content:  # TF2's C++ writer: tensor_content bytes
        fmt = "<f" if dtype == 1 else "<d"
        return tensor_pb2.TensorProto(
            dtype=dtype, tensor_shape=shape, tensor_content=struct.pack(fmt, value)
        )
    if dtype == 1:
        return tensor_pb2.TensorProto(dtype=1, tensor_shape=shape, float_val=[value])
    return tensor_pb2.TensorProto(dtype=2, tensor_shape=shape, double_val=[value])


def _write(path: Path, events: list[event_pb2.Event]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        writer = RecordWriter(fh)
        writer.write(
            event_pb2.Event(wall_time=WALL0, file_version="brain.Event:2").SerializeToString()
        )
        for event in events:
            writer.write(event.SerializeToString())
    return path


def _event(step: int, *values: summary_pb2.Summary.Value, wall: float | None = None):
    return event_pb2.Event(
        wall_time=WALL0 + step if wall is None else wall,
        step=step,
        summary=summary_pb2.Summary(value=list(values)),
    )


def _tf2(step: int, tag: str, dtype: int, content: bool) -> event_pb2.Event:
    """A tensor scalar with the scalars metadata on the tag's first event only, as TF2 may."""
    tensor = _scalar_tensor(_loss(step), dtype, content)
    return _event(step, _tensor_value(tag, tensor, "scalars" if step == 0 else None))


def test_tf2_style_tensors_metadata_once_and_irregular_records(tmp_path: Path) -> None:
    events = [_tf2(s, tag, dtype, dtype == 1) for s in range(150) for tag, dtype in TF2_TAGS]
    want = {
        tag: [
            (s, float(np.float32(_loss(s))) if dtype == 1 else _loss(s), WALL0 + s)
            for s in range(150)
        ]
        for tag, dtype in TF2_TAGS
    }
    # several values in one event, a half tensor, a text tensor, a histogram, wall_time after
    # the summary: all outside the bulk layouts
    half = tensor_pb2.TensorProto(
        dtype=19,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        half_val=[int(np.float16(1.5).view(np.uint16))],
    )
    text = tensor_pb2.TensorProto(dtype=7, string_val=[b"hello"])
    values = [
        summary_pb2.Summary.Value(tag="a", simple_value=1.0),
        summary_pb2.Summary.Value(tag="b", simple_value=2.0),
        _tensor_value("half", half, "scalars"),
        _tensor_value("note", text, "text"),
    ]
    events.append(_event(200, *values))
    histogram = summary_pb2.HistogramProto(min=0, max=1)
    events.append(_event(201, summary_pb2.Summary.Value(tag="h", histo=histogram)))
    path = _write(tmp_path / "events.out.tfevents.1.host", events)
    with open(path, "ab") as fh:  # wall_time after the summary: an irregular layout
        data = _event(202, summary_pb2.Summary.Value(tag="a", simple_value=5.0), wall=0.0)
        raw = data.SerializeToString() + event_pb2.Event(wall_time=WALL0).SerializeToString()
        RecordWriter(fh).write(raw)
    frame = READER.read(path).metrics
    for tag, rows in want.items():
        assert _same(_rows(frame, tag), rows), tag
    tail = frame.filter(pl.col("step") >= 200)
    assert tail.select("step", "raw_name", "value").rows() == [
        (200, "a", 1.0),
        (200, "b", 2.0),
        (200, "half", 1.5),
        (202, "a", 5.0),
    ]
    assert tail["wall_time"].to_list()[-1] == WALL0


def test_tensor_without_plugin_metadata_is_skipped_with_a_warning(tmp_path: Path) -> None:
    events = [_event(s, _tensor_value("x", _scalar_tensor(1.0, 1, True), None)) for s in range(3)]
    result = READER.read(_write(tmp_path / "events.out.tfevents.2.host", events))
    assert result.metrics.height == 0
    assert "no plugin metadata" in result.warnings[0]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["loss", "lr", "grad/norm", "ü"]),
            st.integers(min_value=-(2**40), max_value=2**62),
            st.floats(width=32, allow_nan=True, allow_infinity=True),
            st.sampled_from(["simple", "f32", "f64", "content"]),
            st.floats(min_value=0, max_value=2e9, allow_nan=False),
        ),
        max_size=150,
    )
)
def test_whatever_is_written_is_read_back(tmp_path: Path, records: list) -> None:
    events, want = [], []
    for tag, step, value, kind, wall in records:
        tag = f"{tag}_{kind}"  # a tag keeps one kind, as with any real writer
        if kind == "simple":
            item = summary_pb2.Summary.Value(tag=tag, simple_value=value)
        else:
            tensor = _scalar_tensor(value, 2 if kind == "f64" else 1, kind == "content")
            item = _tensor_value(tag, tensor, "scalars")
        events.append(_event(step, item, wall=wall))
        want.append((step, tag, value, wall))
    path = _write(tmp_path / f"h{len(records)}" / "events.out.tfevents.3.host", events)
    got = READER.read(path).metrics.rows()
    assert len(got) == len(want)
    for (s, t, v, w), (gs, gt, gv, gw) in zip(want, got, strict=True):
        assert (gs, gt, gw) == (s, t, w)
        assert gv == v or (math.isnan(gv) and math.isnan(v))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300))
def test_garbage_gives_a_clean_error(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "events.out.tfevents.4.host"
    path.write_bytes(blob)
    try:
        result = READER.read(path)
    except InputError as exc:
        assert str(path) in str(exc)
    else:
        assert result.metrics.height == 0


# ----- damage -------------------------------------------------------------------------------
def test_torn_last_record_keeps_the_good_part(tmp_path: Path) -> None:
    written = _summary_writer(tmp_path / "run", list(range(100)))
    path = _event_file(tmp_path / "run")
    last = _record_offsets(path.read_bytes())[-1]
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 7)
    result = READER.read(path)
    assert f"torn last record at byte offset {last}" in result.warnings[0]
    assert result.events.rows() == [
        (99, "torn_record", f"{path.name}: torn record at byte offset {last}")
    ]
    assert _same(_rows(result.metrics, "loss"), written["loss"])
    assert _same(_rows(result.metrics, "lr64"), written["lr64"][:-1])


def test_checksum_mismatch_mid_file_names_the_offset(tmp_path: Path) -> None:
    _summary_writer(tmp_path / "run", list(range(100)))
    path = _event_file(tmp_path / "run")
    raw = bytearray(path.read_bytes())
    offsets = _record_offsets(bytes(raw))
    bad = offsets[50]
    raw[bad + 12 + 3] ^= 0x01  # a byte inside the wall time of record 50
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=rf"byte offset {bad}: data checksum"):
        READER.read(path)
    raw[bad + 12 + 3] ^= 0x01
    raw[offsets[60]] ^= 0x01  # its length field
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=rf"byte offset {offsets[60]}: length checksum"):
        READER.read(path)


def _record_offsets(raw: bytes) -> list[int]:
    pos, out = 0, []
    while pos < len(raw):
        out.append(pos)
        pos += 16 + struct.unpack_from("<Q", raw, pos)[0]
    return out


# ----- through the store --------------------------------------------------------------------
def test_second_ingest_adds_nothing(tmp_path: Path, tmp_db: Path) -> None:
    written = _summary_writer(tmp_path / "tbrun", list(range(50)))
    with open_store(tmp_db) as store:
        ingest(store, [tmp_path / "tbrun"])
        first = store.query("SELECT count(*) AS n FROM metrics")["n"][0]
        ingest(store, [tmp_path / "tbrun"])
        assert store.query("SELECT count(*) AS n FROM metrics")["n"][0] == first == 150
        assert store.run_names() == ["tbrun"]
        loss = store.metrics_long("tbrun", ["loss"])
        assert _same(
            list(zip(loss["step"], loss["value"], loss["wall_time"], strict=True)), written["loss"]
        )


def test_the_hf_trainers_event_file_reads_its_zero_losses_as_nan(tmp_path: Path) -> None:
    """The Trainer's TensorBoardCallback logs `train/loss` 0.0 for a window whose every loss
    was NaN (logging_nan_inf_filter), beside `train/grad_norm` NaN, as in trainer_state.json.
    A run that crashed after its last checkpoint has its last windows only in the event file:
    they were stored as a loss of 0.0 (probe: a weight set to inf at 200, crash at 262)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs"))
    for step in range(5, 265, 5):
        bad = step >= 205
        writer.add_scalar("train/loss", 0.0 if bad else 1.6 - step / 1000, step)
        writer.add_scalar("train/grad_norm", math.nan if bad else 0.9, step)
        writer.add_scalar("train/learning_rate", 5e-5, step)
        writer.add_scalar("train/epoch", step / 500, step)
    writer.close()
    res = TensorBoardReader().read(tmp_path / "runs")
    loss = res.metrics.filter(pl.col("raw_name") == "train/loss").sort("step")
    values = dict(zip(loss["step"].to_list(), loss["value"].to_list(), strict=True))
    assert all(math.isnan(values[s]) for s in range(205, 265, 5))
    assert abs(values[200] - 1.4) < 1e-6
    assert any("'loss: 0.0' entries (steps 205..260) read as NaN" in w for w in res.warnings)


def test_an_event_files_float32_copy_of_the_state_file_is_not_called_different(
    tmp_path: Path,
) -> None:
    """The Trainer writes each logged value to trainer_state.json (float64) and to its event
    file (float32): the ingest said "(111 differ)" of values equal but for that rounding."""
    import json

    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "hf_run"
    run.mkdir()
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "hf_fp16_overflow"
    state = json.loads((fixture / "trainer_state.json").read_text())
    for e in state["log_history"]:  # a window's mean in float64 (1.8167930841445923 ...)
        if "loss" in e:
            e["loss"] += 1e-9
    (run / "trainer_state.json").write_text(json.dumps(state, indent=2))
    writer = SummaryWriter(str(run / "runs"))
    for e in state["log_history"]:
        if "loss" in e:
            writer.add_scalar("train/loss", e["loss"], e["step"])  # ... 1.8167930603027345
    writer.close()
    with open_store(tmp_path / "t.duckdb") as store:
        summaries = ingest(store, [run])
    said = [w for s in summaries for src in s.sources for w in src.warnings]
    assert any("all equal to those kept to float32 precision" in w for w in said), said
    assert not any(" differ)" in w for w in said)

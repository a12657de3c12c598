"""MLflow file-store runs (`mlruns/<experiment_id>/<run_id>/`).

A run folder holds `metrics/<name>` files (one `<timestamp ms> <value> <step>` line per
logged value; names with '/' are sub-folders; pre-1.0 files have no step, which MLflow
itself reads as step 0), `params/<name>` files (one value each, the run's config),
`tags/<name>` and `meta.yaml`. The path given may be the run folder, its experiment
folder or the `mlruns` root: the reader ingests the one active run found there, and asks
for the run folder when there are several (a forensics run is one training run).
Deleted runs (`lifecycle_stage: deleted`, or under `.trash`) are ignored.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputError
from forensics.ingest.base import Reader, ReadResult, register
from forensics.ingest.config import coerce_scalar, normalise_config, safe_yaml
from forensics.ingest.readers._wide import to_float
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

_LINE = "'<timestamp ms> <value> <step>'"
_META_KEYS = ("run_id", "run_name", "experiment_id", "status", "start_time", "end_time", "user_id")


@register
class MlflowReader(Reader):
    name = "mlflow"
    description = "MLflow file store: an mlruns folder, an experiment folder or a run folder"
    priority = 10  # folders only; no other reader claims these

    def sniff(self, path: Path, head: str) -> bool:
        return path.is_dir() and (
            is_run_dir(path) or bool(_runs_in_experiment(path)) or bool(_runs_in_root(path))
        )

    def read(self, path: Path) -> ReadResult:
        run = _the_run(path)
        frames = [_read_metric(f, run) for f in sorted((run / "metrics").rglob("*")) if f.is_file()]
        metrics = (
            pl.concat(frames)
            if frames
            else pl.DataFrame(schema={"step": pl.Int64, "raw_name": pl.Utf8, "value": pl.Float64})
        )
        return ReadResult(metrics, config=_run_config(run))


# ----- finding the run --------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    return (path / "meta.yaml").is_file() and (path / "metrics").is_dir()


def _children(path: Path) -> list[Path]:
    try:
        return sorted(
            c for c in path.iterdir() if c.is_dir() and c.name not in (".trash", "models")
        )
    except OSError:
        return []


def _runs_in_experiment(path: Path) -> list[Path]:
    if not (path / "meta.yaml").is_file() or (path / "metrics").is_dir():
        return []
    return [c for c in _children(path) if is_run_dir(c)]


def _runs_in_root(path: Path) -> list[Path]:
    if (path / "meta.yaml").is_file():
        return []
    return [run for exp in _children(path) for run in _runs_in_experiment(exp)]


def run_meta(run: Path) -> dict[str, Any]:
    """A run folder's `meta.yaml` as a mapping; InputError naming the file when it cannot
    be read or is no mapping. Parsed once per version of the file: discovery (deleted runs,
    run names), the choice of the active run and the run's config all ask for it."""
    meta_path = run / "meta.yaml"
    try:
        st = meta_path.stat()
    except OSError as exc:
        raise InputError(meta_path, f"cannot read: {exc}") from exc
    return dict(_parsed_meta(str(meta_path), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=256)
def _parsed_meta(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    meta_path = Path(path)
    try:
        text = meta_path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(meta_path, f"cannot read: {exc}") from exc
    meta = safe_yaml(meta_path, text) or {}
    if not isinstance(meta, dict):
        raise InputError(meta_path, "not a mapping", expected="MLflow run meta.yaml")
    return meta


def _is_active(run: Path) -> bool:
    try:
        meta = run_meta(run)
    except InputError:
        return True  # _run_config reports a broken meta.yaml with its own error
    return meta.get("lifecycle_stage") != "deleted"


def _run_name(run: Path) -> str:
    tag = run / "tags" / "mlflow.runName"
    try:
        return f" ({tag.read_text(encoding='utf-8').strip()})" if tag.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return ""


def _the_run(path: Path) -> Path:
    if is_run_dir(path):
        return path
    runs = [r for r in _runs_in_experiment(path) or _runs_in_root(path) if _is_active(r)]
    if not runs:
        raise InputError(path, "no MLflow run here", expected="mlruns/<experiment>/<run_id>/")
    if len(runs) > 1:
        listed = ", ".join(f"{r.parent.name}/{r.name}{_run_name(r)}" for r in runs)
        raise InputError(
            path,
            f"holds {len(runs)} MLflow runs ({listed}); pass the run folder, e.g. {runs[0]}",
            expected="one run folder per forensics run",
        )
    return runs[0]


# ----- metrics ----------------------------------------------------------------------------


def _read_metric(path: Path, run: Path) -> pl.DataFrame:
    """One metric file as long rows; a malformed line is an InputError naming it."""
    name = path.relative_to(run / "metrics").as_posix()
    try:
        raw = pl.read_csv(path, separator=" ", has_header=False, infer_schema=False)
    except pl.exceptions.NoDataError:
        return pl.DataFrame(schema={"step": pl.Int64, "raw_name": pl.Utf8, "value": pl.Float64})
    except pl.exceptions.PolarsError as exc:
        raise _bad_line(path, str(exc)) from exc
    if raw.width not in (2, 3):
        raise _bad_line(path, f"{raw.width} fields")
    stamp = raw[:, 0].cast(pl.Int64, strict=False)
    value = to_float(raw[:, 1])
    if value is None:
        value = pl.Series([None] * raw.height, dtype=pl.Float64)
    step = (
        raw[:, 2].cast(pl.Int64, strict=False)
        if raw.width == 3
        else pl.repeat(0, raw.height, dtype=pl.Int64, eager=True)
    )
    bad = (stamp.is_null() | value.is_null() | step.is_null()).arg_true()
    if bad.len():
        raise _bad_line(path, f"cannot read {' '.join(map(str, raw.row(int(bad[0]))))!r}")
    return pl.DataFrame(
        {
            "step": step.cast(pl.Int64),
            "raw_name": pl.repeat(name, raw.height, dtype=pl.Utf8, eager=True),
            "value": value,
            "wall_time": stamp.cast(pl.Float64) / 1000.0,
        }
    )


def _bad_line(path: Path, problem: str) -> InputError:
    """Locate the first line that is not `ts value [step]` to name it in the error."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            ok = (
                len(parts) in (2, 3)
                and _is_int(parts[0])
                and (len(parts) == 2 or _is_int(parts[2]))
            )
            if ok and to_float(pl.Series([parts[1]])) is not None:
                continue
            return InputError(path, f"malformed metric line {line.strip()[:60]!r}", line=n,
                              expected=_LINE)  # fmt: skip
    return InputError(
        path, f"malformed metric file ({problem.splitlines()[0][:80]})", expected=_LINE
    )


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


# ----- config -----------------------------------------------------------------------------


def _read_values(folder: Path) -> dict[str, Any]:
    """params/ or tags/: one value per file, names with '/' as sub-folders."""
    out: dict[str, Any] = {}
    if not folder.is_dir():
        return out
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            try:
                out[f.relative_to(folder).as_posix()] = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
    return out


def _run_config(run: Path) -> dict[str, Any]:
    meta = run_meta(run)
    params = {k: coerce_scalar(v) for k, v in _read_values(run / "params").items()}
    extra = {f"mlflow.{k}": meta[k] for k in _META_KEYS if k in meta}
    extra.update({f"mlflow.tags.{k}": v for k, v in _read_values(run / "tags").items()})
    return {**normalise_config(params), **extra}

"""Run configuration files: recognise them, parse them, and name the settings forensics needs.

A run's hyperparameters are spread over whatever its framework writes (`config.json`,
Lightning's `hparams.yaml`, HF `training_args.json`, an argparse `Namespace(...)` dump,
W&B's `config.yaml`). `load_config` keeps every raw key (nested keys flattened with
'.') and adds *canonical* keys that later stages read without knowing the framework:

    beta1, beta2, peak_lr, min_lr, warmup_steps, grad_clip, precision (fp16|bf16|fp32|fp8),
    world_size, seq_len, global_batch_size, total_steps, seed, tokens_per_step,
    lr_schedule (cosine|linear|constant|wsd|inverse_sqrt|polynomial|sqrt_annealing),
    lr_decay_steps, and schedule details: lr_warmup_shape (log), lr_warmup_start (the LR a
    warm-up starts from, absent for 0), lr_decay_power (polynomial's), lr_floor_clamp (the
    LR is clamped at min_lr rather than decaying to it), lr_wsd_decay_steps/_shape

Durations may be Composer (llm-foundry) time strings (`t_warmup: 100ba`, `0.05dur`) and the
LR's floor a share of the peak (`alpha_f`, Composer's and OLMo's); both are turned into
the canonical steps and min_lr.

Where a raw key already has a canonical name but a different spelling of its value
(Lightning's `precision: bf16-mixed`), the canonical value wins and the raw one is kept
under `<key>_raw`.
"""

from __future__ import annotations

import ast
import json
import math
import re
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from forensics.errors import InputError

_CONFIG_NAMES = frozenset(
    {
        "config.json", "config.yaml", "config.yml", "args.json", "args.yaml", "args.txt",
        "hparams.yaml", "hparams.yml", "hparams.json", "training_args.json",
        "train_config.json", "train_config.yaml", "params.json", "run_config.json",
        "run_config.yaml", "model_config.yaml", "cmd_args.txt",
    }
)  # fmt: skip
# Never a config even when the name looks like one: they hold per-step metrics or state.
_NOT_CONFIG_NAMES = frozenset({"trainer_state.json", "wandb-summary.json", "wandb-metadata.json"})
# JSON that is really a metrics log: HF trainer state, Megatron golden values.
_METRIC_MARKERS = ('"log_history"', '"step_interval"')
_SNIFF_BYTES = 65536
_NAMESPACE = re.compile(r"^\s*Namespace\(")
# One setting per line, one value token: `--lr 3e-4`, `lr=3e-4`, `lr: 3e-4` (not log lines).
_KEY_VALUE_LINE = re.compile(
    r"""^\s*-{0,2}[A-Za-z_][\w.\-]*\s*(?:[:=]\s*|\s+)("[^"]*"|'[^']*'|\S+)?\s*$"""
)


# ----- recognising ------------------------------------------------------------------------


def is_config_file(path: Path) -> bool:
    """True for a run-config file; False for metric logs that merely share an extension.

    Recognition is by name (the set above, plus `*_config.json|yaml`), then confirmed by a
    look at the head, so a JSONL log or a metrics JSON called `config.json` is not taken.
    Files their users name (a DeepSpeed `ds_config_zero3.json`, an axolotl `qwen_lora.yaml`,
    an llm-foundry `mpt-125m.yaml`, a torchtitan `llama3_8b.toml`) are taken by their
    framework's own keys (_by_content).
    """
    name = path.name.lower()
    if name in _NOT_CONFIG_NAMES or not path.is_file():
        return False
    named = name in _CONFIG_NAMES or re.fullmatch(r".+[_-](config|args)\.(json|ya?ml)", name)
    if not named:
        return _by_content(name, path)
    head = _head(path)
    if name.endswith(".json"):
        return _looks_like_json_config(head)
    if name.endswith(".txt"):
        return bool(_NAMESPACE.match(head)) or _looks_like_key_values(head)
    return not any(m in head for m in _METRIC_MARKERS)


# A framework's own keys, at the top level of a file its user named. DeepSpeed: its ZeRO
# section or per-GPU micro-batch. axolotl (`base_model`, `datasets`, `micro_batch_size`) and
# LLaMA-Factory (`model_name_or_path`, `stage`, `finetuning_type`) YAML: the model and a
# learning rate besides. torchtitan TOML: its `[lr_scheduler]` and `[training]` tables.
_DS_NAME = re.compile(r"(ds|deepspeed)[_-]?(config|z\d|zero).*\.json")
_DS_KEYS = re.compile(r'"(zero_optimization|train_micro_batch_size_per_gpu|train_batch_size)"\s*:')
_YAML_MODEL = re.compile(r"^(base_model|model_name_or_path)\s*:", re.MULTILINE)
_YAML_LR = re.compile(r"^learning_rate\s*:", re.MULTILINE)
_YAML_TRAINER = re.compile(
    r"^(datasets|dataset|stage|finetuning_type|micro_batch_size|sequence_len|cutoff_len)\s*:",
    re.MULTILINE,
)
# Composer (llm-foundry) and OLMo training YAML: a top-level run length, scheduler and
# optimizer section (`max_duration: 4800ba`, `scheduler:`, `optimizer:`)
_YAML_COMPOSER = tuple(
    re.compile(rf"^{key}\s*:", re.MULTILINE) for key in ("max_duration", "scheduler", "optimizer")
)
_TOML_TABLES = (re.compile(r"^\[lr_scheduler\]", re.MULTILINE),
                re.compile(r"^\[training\]", re.MULTILINE))  # fmt: skip


def _by_content(name: str, path: Path) -> bool:
    """A config file its user named, taken only by its framework's own keys (above)."""
    if _DS_NAME.fullmatch(name):
        head = _head(path)
        return _looks_like_json_config(head) and bool(_DS_KEYS.search(head))
    if name.endswith((".yaml", ".yml")):
        head = _head(path)
        marks = (_YAML_MODEL, _YAML_LR, _YAML_TRAINER)
        ours = all(m.search(head) for m in marks) or all(m.search(head) for m in _YAML_COMPOSER)
        return ours and not any(m in head for m in _METRIC_MARKERS)
    if name.endswith(".toml"):
        head = _head(path)
        return all(m.search(head) for m in _TOML_TABLES)
    return False


def _head(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(_SNIFF_BYTES).decode("utf-8", errors="replace")


def _looks_like_json_config(head: str) -> bool:
    """One JSON object (not JSON lines, not a metrics document)."""
    text = head.lstrip()
    if not text.startswith("{") or any(m in head for m in _METRIC_MARKERS):
        return False
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # JSONL: several lines that each hold a whole object.
    whole = [ln for ln in lines[:3] if ln.strip().startswith("{") and ln.strip().endswith("}")]
    return len(whole) < 2


def _looks_like_key_values(head: str) -> bool:
    lines = [ln for ln in head.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and all(_KEY_VALUE_LINE.match(ln) for ln in lines[:20])


# ----- parsing ----------------------------------------------------------------------------


MAX_CONFIG_BYTES = 16 << 20  # a config is kilobytes; more is not a config
MAX_CONFIG_NODES = 1_000_000  # values after YAML aliases are expanded (an alias bomb: billions)


def load_config(path: Path) -> dict[str, Any]:
    """Parse a config file: raw keys flattened with '.', plus the canonical keys."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise InputError(
                path, f"{size} bytes is too big for a config", expected="at most 16 MiB"
            )
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read config: {exc}") from exc
    data = _parse(path, text)
    if not isinstance(data, dict):
        raise InputError(path, f"config is a {type(data).__name__}", expected="a mapping")
    return normalise_config(_unwrap_wandb(data))


def normalise_config(data: dict[str, Any]) -> dict[str, Any]:
    """Flatten nested keys with '.' and add the canonical keys (readers use this too)."""
    flat = flatten(data)
    return add_canonical(flat)


def _parse(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _parse_json(path, text)
    if suffix == ".toml":
        return _parse_toml(path, text)
    if _NAMESPACE.match(text):
        return _parse_namespace(path, text)
    if suffix == ".txt":
        return _parse_key_values(path, text)
    return safe_yaml(path, text)


def _parse_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON: {exc.msg}", line=exc.lineno) from exc
    except (ValueError, RecursionError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from exc


def _parse_toml(path: Path, text: str) -> Any:
    """torchtitan's train_configs/*.toml."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not valid TOML: {exc}") from exc


class _LenientLoader(yaml.SafeLoader):
    """SafeLoader that reads Python-object tags (Lightning hparams of custom types) as data."""


def _construct_any(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_LenientLoader.add_multi_constructor("tag:yaml.org,2002:python/", _construct_any)
_LenientLoader.add_multi_constructor("!", _construct_any)


def check_expanded_size(path: Path, data: Any, limit: int = MAX_CONFIG_NODES) -> None:
    """Refuse a document whose aliases expand it past `limit` values: PyYAML shares an
    aliased node, so 300 bytes of nested aliases load instantly and then take gigabytes to
    walk (flatten, json.dumps). Counting stops at the limit, so the check itself is cheap."""
    stack, seen = [data], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            raise InputError(
                path, f"expands to more than {limit:,} values (YAML aliases)",
                expected="a config without an alias bomb",
            )  # fmt: skip
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)


def safe_yaml(path: Path, text: str) -> Any:
    """Untrusted YAML: safe tags only (Python tags read as data), aliases bounded."""
    data = _parse_yaml(path, text)
    check_expanded_size(path, data)
    return data


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_LenientLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"not valid YAML: {problem}", line=line) from exc
    except RecursionError as exc:
        raise InputError(path, "not valid YAML: nested too deeply") from exc


def _parse_namespace(path: Path, text: str) -> dict[str, Any]:
    """`Namespace(lr=0.1, betas=(0.9, 0.95), name='x')` as printed by argparse."""
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        msg = f"not a valid Namespace(...) dump: {exc.msg}"
        raise InputError(path, msg, line=exc.lineno) from exc
    if not isinstance(call, ast.Call):
        raise InputError(path, "not a Namespace(...) dump", expected="Namespace(key=value, ...)")
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            out[kw.arg] = ast.get_source_segment(text.strip(), kw.value)  # e.g. a device object
    return out


def _parse_key_values(path: Path, text: str) -> dict[str, Any]:
    """`key: value`, `key=value` or `--key value` lines (args.txt written by hand or shell)."""
    out: dict[str, Any] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^\s*-{0,2}([\w.\-]+)\s*(?:[:=]\s*|\s+)(.*?)\s*$", line)
        if m is None:
            raise InputError(path, "cannot parse line", line=n, expected="key: value or key=value")
        out[m.group(1)] = coerce_scalar(m.group(2))
    return out


def _unwrap_wandb(data: dict[str, Any]) -> dict[str, Any]:
    """W&B's config.yaml wraps each value as {desc: ..., value: X}; keep X, drop `_wandb`."""
    items = {k: v for k, v in data.items() if k not in ("wandb_version", "_wandb")}
    wrapped = items and all(isinstance(v, dict) and "value" in v for v in items.values())
    if not wrapped or len(items) == len(data):
        return data
    return {k: v["value"] for k, v in items.items()}


def coerce_scalar(text: str) -> Any:
    """A string parameter (MLflow params, args.txt) as the number/bool/None it spells."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null", ""):
        return None
    for conv in (int, float):
        try:
            return conv(s)  # type: ignore[operator]
        except ValueError:
            pass
    return s


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted keys; lists and scalars are kept as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


# ----- canonical keys ---------------------------------------------------------------------

# Spellings per canonical key, most specific first. A spelling matches a flattened key
# equal to it or ending in '.' + it (so `optimizer.lr` matches `lr`), case-insensitively.
_SPELLINGS: dict[str, tuple[str, ...]] = {
    "beta1": ("beta1", "adam_beta1", "optimizer.beta1", "b1"),
    "beta2": ("beta2", "adam_beta2", "optimizer.beta2", "b2"),
    "betas": ("betas", "adam_betas", "optimizer.betas", "optim.betas"),
    "peak_lr": ("peak_lr", "max_lr", "lr_max", "lr", "learning_rate", "base_lr", "max_lr_rate"),
    "min_lr": ("min_lr", "lr_min", "min_learning_rate", "eta_min", "final_lr", "end_lr"),
    "warmup_steps": (
        "warmup_steps", "warmup_iters", "lr_warmup_iters", "lr_warmup_steps",
        "num_warmup_steps", "warmup_updates", "warmup_iterations", "t_warmup", "warmup",
    ),
    "warmup_fraction": ("warmup_ratio", "lr_warmup_fraction", "warmup_fraction", "pct_start"),
    "grad_clip": (
        "grad_clip", "clip_grad", "max_grad_norm", "gradient_clip_val", "clip_grad_norm",
        "grad_clip_norm", "clip_norm", "gradient_clipping", "training.max_norm",
    ),
    "precision": (
        "precision", "mixed_precision", "amp_dtype", "dtype", "params_dtype",
        "mixed_precision_param",
    ),
    "world_size": ("world_size", "n_gpus", "num_gpus", "ngpus", "total_gpus", "num_processes"),
    "gpus_per_node": ("gpus_per_node", "nproc_per_node", "num_gpus_per_node", "devices", "gpus"),
    "nodes": ("num_nodes", "nnodes", "n_nodes", "nodes"),
    "seq_len": (
        "seq_len", "seq_length", "max_seq_len", "max_seq_length", "block_size",
        "context_length", "sequence_length", "encoder_seq_length", "max_sequence_length",
        "sequence_len", "cutoff_len",
    ),
    "global_batch_size": (
        "global_batch_size", "total_batch_size", "gbs", "global_batch", "global_train_batch_size",
    ),
    "micro_batch_size": (
        "micro_batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu",
        "micro_batch", "device_train_batch_size", "batch_size",
    ),
    "grad_accum": (
        "gradient_accumulation_steps", "grad_accum", "accumulate_grad_batches",
        "gradient_accumulation", "grad_accum_steps",
    ),
    "total_steps": (
        "total_steps", "max_steps", "train_iters", "max_iters", "num_training_steps",
        "total_iters", "num_iterations", "train_steps", "max_duration",
    ),
    "seed": ("seed", "random_seed", "global_seed"),
    "vocab_size": ("vocab_size", "padded_vocab_size", "n_vocab"),
    "lr_schedule": (
        "lr_schedule", "lr_scheduler_type", "lr_decay_style", "decay_style", "lr_scheduler",
        "scheduler", "lr_scheduler.name", "scheduler.name", "sched.name",
    ),
    "lr_decay_steps": ("lr_decay_iters", "lr_decay_steps", "decay_steps"),
    # Megatron's WSD: the decay over the last lr_wsd_decay_iters of lr_decay_iters
    "lr_wsd_decay_steps": ("lr_wsd_decay_iters", "lr_wsd_decay_steps"),
    "lr_wsd_decay_shape": ("lr_wsd_decay_style",),
    # the final LR as a share of the peak: Composer/llm-foundry and OLMo's `alpha_f`, HF's
    # cosine_with_min_lr `min_lr_rate`
    "min_lr_fraction": (
        "alpha_f", "min_lr_rate", "min_lr_ratio", "min_lr_factor", "cosine_min_lr_ratio",
    ),
    "lr_units": ("scheduler.units",),  # OLMo: "steps" or "tokens" (t_warmup in tokens)
    "clip_threshold": ("gradient_clipping.clipping_threshold",),  # Composer's algorithm
    "clip_type": ("gradient_clipping.clipping_type",),
    "tokens_per_step": ("tokens_per_step", "tokens_per_batch", "batch_size_tokens"),
    "ds_scheduler": ("scheduler.type",),  # DeepSpeed's ds_config.json
    "ds_batch": ("train_batch_size",),  # global only in a DeepSpeed config (HF: per device)
    "nemo_constant_steps": ("sched.constant_steps",),  # NeMo: held at min_lr at the end
    "nemo_scheduler": ("sched.name",),  # NeMo's optim.sched (_nemo)
    "nemo_power": ("sched.power",),
    "nemo_d_model": ("sched.d_model",),
    "hf_args": ("per_device_train_batch_size",),  # marks HF TrainingArguments (and its kin)
}  # fmt: skip


def _lookup_name(key: str) -> str:
    """`MODEL_ARGS.--adam-beta2` (Megatron CI model_config.yaml) → `model_args.adam_beta2`."""
    return ".".join(part.lstrip("-").replace("-", "_") for part in key.lower().split("."))


class _Lookup:
    """Finds the first flattened key matching a spelling (names as `_lookup_name` gives)."""

    def __init__(self, flat: dict[str, Any]) -> None:
        self.items = [(_lookup_name(k), v) for k, v in flat.items()]

    def first(self, spellings: Iterable[str], accept: Callable[[Any], Any]) -> Any:
        for spelling in spellings:
            for key, value in self.items:
                if key == spelling or key.endswith("." + spelling):
                    got = accept(value)
                    if got is not None:
                        return got
        return None

    def get(self, canon: str, accept: Callable[[Any], Any]) -> Any:
        return self.first(_SPELLINGS[canon], accept)


def _number(value: Any) -> float | None:
    """A finite number, also from a string ("3e-4": YAML reads it as text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = coerce_scalar(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _positive_int(value: Any) -> int | None:
    num = _number(value)
    return int(num) if num is not None and num > 0 and num == int(num) else None


def _nonneg_int(value: Any) -> int | None:
    num = _number(value)
    return int(num) if num is not None and num >= 0 and num == int(num) else None


# Composer (llm-foundry) writes durations as time strings: `100ba` batches (optimizer steps),
# `0.05dur` a share of max_duration; `ep`, `sp`, `tok` need the epoch's or batch's size.
_COMPOSER_TIME = re.compile(r"^\s*([0-9.eE+-]+)\s*(ba|dur)\s*$")


def _composer(value: Any, unit: str) -> float | None:
    m = _COMPOSER_TIME.match(value) if isinstance(value, str) else None
    return _number(m.group(1)) if m and m.group(2) == unit else None


def _steps(value: Any, *, positive: bool = False) -> int | None:
    """A step count: a number, or a Composer `<n>ba`."""
    got = _composer(value, "ba")
    num = got if got is not None else _number(value)
    ok = num is not None and num == int(num) and (num > 0 if positive else num >= 0)
    return int(num) if ok and num is not None else None


def _positive_steps(value: Any) -> int | None:
    return _steps(value, positive=True)


def _duration_share(value: Any) -> float | None:
    """Composer's `<x>dur`: a share of the run's max_duration."""
    got = _composer(value, "dur")
    return got if got is not None and 0 <= got <= 1 else None


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, list | tuple) and len(value) == 2:
        a, b = _number(value[0]), _number(value[1])
        if a is not None and b is not None:
            return a, b
    return None


def _precision_name(value: Any) -> str | None:
    """fp16/bf16/fp32/fp8/fp64 from the many spellings (16-mixed, torch.bfloat16, 'half')."""
    if isinstance(value, bool) or value is None:
        return None
    s = str(value).lower()
    table = [
        ("bf16", ("bf16", "bfloat16")),
        ("fp8", ("fp8", "float8", "e4m3")),
        ("fp16", ("fp16", "float16", "half", "16")),
        ("fp64", ("fp64", "float64", "double", "64")),
        ("fp32", ("fp32", "float32", "float", "32", "tf32", "no")),
    ]
    for name, needles in table:
        if any(n in s for n in needles):
            return name
    return None


# A Hugging Face model config (`config.json` beside the weights) says the dtype its weights
# are stored in (`torch_dtype`, `dtype` since transformers 5), not how the run trained: an
# fp16-autocast run saves float32 weights. Its dtype is not the run's precision.
HF_MODEL_CONFIG = ("model_type", "transformers_version", "architectures")  # any marks one


def _precision(look: _Lookup) -> str | None:
    for flag in ("bf16", "fp16", "fp8"):  # Megatron/HF flags `bf16: true`, DeepSpeed's
        if look.first((flag, flag + ".enabled"), lambda v: True if v is True else None):
            return flag
    spellings = _SPELLINGS["precision"]
    if any(look.first((k,), lambda v: v if v is not None else None) for k in HF_MODEL_CONFIG):
        spellings = tuple(s for s in spellings if s not in ("dtype", "torch_dtype"))
    return look.first(spellings, _precision_name)


# Schedule names as HF (`lr_scheduler_type`), Megatron (`lr_decay_style`) and common loops
# spell them, to the shapes detect/schedule.py computes; anything else stays unknown.
_SCHEDULES = (
    (
        "inverse_sqrt",
        ("inverse_sqrt", "inverse-square-root", "rsqrt", "inverse_square_root", "inv_sqrt"),
    ),
    ("wsd", ("wsd", "warmup_stable_decay", "stable")),
    ("cosine", ("cosine", "cos")),
    ("linear", ("linear",)),
    ("constant", ("constant",)),
)


def schedule_name(value: Any) -> str | None:
    """The shape a schedule's name gives, or None. A restart or cycle rises again mid-run,
    which no shape computed from the config follows. A continued pre-training run's
    "re-warm" (`rewarm_cosine`) is its warm-up: the LR rises again from the last stage's
    floor at this run's start, over the warm-up steps its config gives, then decays as
    named (Gupta et al. 2023, "Continual pre-training of LLMs: how to (re)warm your model")."""
    if not isinstance(value, str):
        return None
    s = value.lower()
    if "restart" in s or "cyclic" in s or "cycle" in s:
        return None
    return next((name for name, keys in _SCHEDULES if any(k in s for k in keys)), None)


def _world_size(look: _Lookup) -> int | None:
    direct = look.get("world_size", _positive_int)
    if direct is not None:
        return int(direct)
    per_node = look.get("gpus_per_node", _positive_int)
    if per_node is None:
        return None
    nodes = look.get("nodes", _positive_int) or 1
    return int(per_node) * int(nodes)


def _global_batch(look: _Lookup, world: int | None) -> int | None:
    direct = look.get("global_batch_size", _positive_int)
    if direct is not None:
        return int(direct)
    micro = look.get("micro_batch_size", _positive_int)
    if micro is None or world is None:
        return None
    accum = look.get("grad_accum", _positive_int) or 1
    return int(micro) * int(accum) * world


def _warmup(look: _Lookup, total: int | None) -> int | None:
    """Warm-up steps: a count, or a share of the run (`warmup_ratio`, Composer's `0.1dur`).
    A count of 0 beside a share is HF's default, "use the ratio" (`warmup_steps: 0,
    warmup_ratio: 0.1`), as is Megatron's fraction over its iters. None when OLMo's
    scheduler counts in tokens: its t_warmup is no step count then."""
    if str(look.get("lr_units", lambda v: v) or "steps").lower() == "tokens":
        return None
    warmup = look.get("warmup_steps", _nonneg_steps)
    frac = look.get("warmup_fraction", _number)
    if frac is None:
        frac = look.get("warmup_steps", _duration_share)
    if frac is None and look.get("hf_args", lambda v: v) is not None:
        frac = look.get("warmup_steps", _hf_warmup_share)
    if not warmup and frac:
        return round(frac * total) if total else None
    return warmup  # type: ignore[no-any-return]


def _hf_warmup_share(value: Any) -> float | None:
    """transformers 5 dropped `warmup_ratio`: a `warmup_steps` under 1 is the share."""
    num = _number(value)
    return num if num is not None and 0 < num < 1 else None


def _nonneg_steps(value: Any) -> int | None:
    return _steps(value)


def _min_lr(look: _Lookup) -> float | None:
    """The LR's floor: an absolute min_lr, else the final share (`alpha_f`) x the peak."""
    direct = look.get("min_lr", _number)
    if direct is None:
        return _share_of(look.get("min_lr_fraction", _number), look.get("peak_lr", _number))
    return direct  # type: ignore[no-any-return]


def _grad_clip(look: _Lookup) -> float | None:
    """max_grad_norm and its kin, else Composer's gradient_clipping algorithm when it clips
    the norm (its `value` and `adaptive` thresholds are no norm)."""
    direct = look.get("grad_clip", _number)
    if direct is not None:
        return direct  # type: ignore[no-any-return]
    kind = str(look.get("clip_type", lambda v: v) or "norm").lower()
    return look.get("clip_threshold", _number) if kind == "norm" else None


def _derived(look: _Lookup) -> dict[str, Any]:
    """Canonical values that are computed from several keys."""
    out: dict[str, Any] = {}
    betas = look.get("betas", _pair)
    for i, key in enumerate(("beta1", "beta2")):
        direct = look.get(key, _number)
        out[key] = direct if direct is not None or betas is None else betas[i]
    out["precision"] = _precision(look)
    out["world_size"] = _world_size(look)
    out["global_batch_size"] = _global_batch(look, out["world_size"])
    out["total_steps"] = look.get("total_steps", _positive_steps)
    # Megatron's lr_warmup_fraction is a share of its decay length (lr_warmup_steps =
    # lr_warmup_fraction x lr_decay_steps in its get_optimizer_param_scheduler), not of
    # train_iters; HF's warmup_ratio is of the run
    megatron = look.first(("lr_warmup_fraction",), _number) is not None
    decay = look.get("lr_decay_steps", _positive_steps) if megatron else None
    out["warmup_steps"] = _warmup(look, decay or out["total_steps"])
    out["seq_len"] = look.get("seq_len", _positive_int)
    tokens = look.get("tokens_per_step", _positive_int)
    if tokens is None and out["global_batch_size"] and out["seq_len"]:
        tokens = out["global_batch_size"] * out["seq_len"]
    out["tokens_per_step"] = tokens
    return out


# DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py), by `scheduler.type`: WarmupLR
# warms up from `warmup_min_lr` to `warmup_max_lr` and holds it; WarmupDecayLR then falls
# linearly back to `warmup_min_lr` at `total_num_steps`; WarmupCosineLR scales the
# optimizer's lr by a share that warms up from `warmup_min_ratio` to 1 and falls on a cosine
# to `cos_min_ratio`. The warm-up is logarithmic unless `warmup_type: linear`: min + (max -
# min) x log(i + 1) / log(warmup_num_steps), or x i / warmup_num_steps. An absent parameter
# has DeepSpeed's default; "auto" (the HF Trainer fills it from its own arguments, not in
# this file) leaves the value unknown.
_DS_SHAPES = {"warmuplr": "constant", "warmupdecaylr": "linear", "warmupcosinelr": "cosine"}
_DS_DEFAULTS: dict[str, Any] = {
    "warmup_num_steps": 1000, "warmup_max_lr": 0.001, "warmup_min_lr": 0.0,
    "cos_min_ratio": 0.0001, "warmup_type": "log", "warmup_min_ratio": 0.0,
}  # fmt: skip


def _ds_shape(value: Any) -> str | None:
    return _DS_SHAPES.get(value.lower()) if isinstance(value, str) else None


def _ds_param(look: _Lookup, name: str, accept: Callable[[Any], Any]) -> Any:
    """A DeepSpeed scheduler parameter: its value, DeepSpeed's default when absent."""
    given = look.first((f"scheduler.params.{name}",), lambda v: (v,))
    return accept(given[0] if given is not None else _DS_DEFAULTS.get(name))


def _warmup_shape(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) and value.lower() in ("log", "linear") else None


def _deepspeed(look: _Lookup) -> dict[str, Any]:
    """The canonical schedule of a DeepSpeed scheduler (above); {} for none of them."""
    kind = look.get("ds_scheduler", _ds_shape)
    if kind is None:
        return {}
    out: dict[str, Any] = {
        "lr_schedule": kind,
        "warmup_steps": _ds_param(look, "warmup_num_steps", _nonneg_steps),
        "lr_warmup_shape": _ds_param(look, "warmup_type", _warmup_shape),
        "total_steps": look.get("total_steps", _positive_steps),
    }
    if kind != "constant":
        out["total_steps"] = _ds_param(look, "total_num_steps", _positive_steps)
    if kind == "cosine":
        share, peak = _ds_param(look, "cos_min_ratio", _number), look.get("peak_lr", _number)
        out["min_lr"] = _share_of(share, peak)
        start = _share_of(_ds_param(look, "warmup_min_ratio", _number), peak)
    else:  # the scheduler sets the LR itself: the optimizer's lr is not used
        out["peak_lr"] = _ds_param(look, "warmup_max_lr", _number)
        start = _ds_param(look, "warmup_min_lr", _number)
        out["min_lr"] = start if kind == "linear" else None
    # the LR the warm-up starts from; absent (as for every other framework) when it is 0
    out["lr_warmup_start"] = start or None
    return out


def _share_of(share: float | None, peak: float | None) -> float | None:
    """share x peak, printed as the config would (0.1 x 6e-4 = 6e-5, not 5.9999999999999995e-05)."""
    if share is None or peak is None or not 0 <= share <= 1:
        return None
    return float(f"{share * peak:.12g}")


def _is_deepspeed(flat: dict[str, Any]) -> bool:
    """A DeepSpeed config: its ZeRO section or per-GPU micro-batch are DeepSpeed's own keys."""
    return any(k.startswith(("zero_optimization", "train_micro_batch_size_per_gpu")) for k in flat)


def _deepspeed_batch(look: _Lookup) -> dict[str, Any]:
    """DeepSpeed's `train_batch_size` is the global batch (micro x accumulation x GPUs)."""
    return {"global_batch_size": look.get("ds_batch", _positive_int)}


# torchtitan's TOML (torchtitan/components/lr_scheduler.py): a linear warm-up over
# `lr_scheduler.warmup_steps`, the peak held, then a decay (`decay_type` linear, sqrt or
# cosine; linear when unset) over the last `decay_ratio` share of `training.steps` (over all
# steps after the warm-up when unset) to `min_lr_factor` x lr (`lr_min`, older: also a factor).
_TITAN_KEYS = ("training.steps", "lr_scheduler.warmup_steps")


def _torchtitan(flat: dict[str, Any], look: _Lookup) -> dict[str, Any]:
    """torchtitan's schedule (above) as the canonical shapes; {} for no torchtitan config.
    Its `lr_min` is a factor of the peak, not the absolute floor it is elsewhere (timm)."""
    if not all(k in flat for k in _TITAN_KEYS):
        return {}
    steps, warm = _positive_steps(flat[_TITAN_KEYS[0]]), _nonneg_steps(flat[_TITAN_KEYS[1]])
    keys = ("lr_scheduler.min_lr_factor", "lr_scheduler.lr_min")
    factor = next((_number(flat[k]) for k in keys if k in flat), 0.0)
    out: dict[str, Any] = {
        "total_steps": steps, "warmup_steps": warm,
        "min_lr": _share_of(factor, look.get("peak_lr", _number)),
    }  # fmt: skip
    if steps is None or warm is None:
        return {**out, "lr_schedule": None}
    return {**out, **_titan_shape(flat, steps, warm)}


def _titan_shape(flat: dict[str, Any], steps: int, warm: int) -> dict[str, Any]:
    """cosine/linear when the decay follows the warm-up, wsd when a stable phase comes first
    (or the decay is sqrt, a shape only wsd's decay has)."""
    shape = flat.get("lr_scheduler.decay_type", "linear")
    ratio = _number(flat.get("lr_scheduler.decay_ratio"))
    decay = steps - warm if ratio is None else round(steps * ratio)
    if shape not in ("linear", "cosine", "sqrt") or decay <= 0 or warm + decay > steps:
        return {"lr_schedule": None}  # torchtitan versions differ on an overlap: unknown
    if warm + decay == steps and shape != "sqrt":
        return {"lr_schedule": shape}
    return {"lr_schedule": "wsd", "lr_wsd_decay_steps": decay, "lr_wsd_decay_shape": shape}


# Megatron's lr_wsd_decay_style to the decay shapes detect/schedule.py computes
_WSD_STYLES = {"linear": "linear", "cosine": "cosine", "minus_sqrt": "sqrt",
               "exponential": "exponential"}  # fmt: skip


def _wsd_shape(value: Any) -> str | None:
    return _WSD_STYLES.get(value.lower()) if isinstance(value, str) else None


def _nemo_decay_end(look: _Lookup, total: int | None) -> int | None:
    """NeMo's CosineAnnealing with `constant_steps` ends its decay that many steps before
    max_steps and holds min_lr after (nemo/core/optim/lr_scheduler.py)."""
    held = look.get("nemo_constant_steps", _positive_int)
    return total - held if held and total and total - held > 0 else None


# NeMo's other schedulers (nemo/core/optim/lr_scheduler.py) by `optim.sched.name`, each
# after WarmupPolicy's warm-up ((step + 1) / (warmup_steps + 1) of lr, a step from the
# linear warm-up computed) and with its `min_lr` after max_steps:
# - WarmupPolicy: lr; WarmupHoldPolicy: lr through its hold (hold_steps / hold_ratio x
#   max_steps after the warm-up) and after it, WarmupPolicy's lr: both constant;
# - WarmupAnnealing: min_lr + (lr - min_lr) x (1 - (step - warmup) / (max_steps - warmup)),
#   linear;
# - InverseSquareRootAnnealing: lr / sqrt((step + 1) / (warmup + 1)), no floor: inverse_sqrt;
# - SquareRootAnnealing: max(lr x sqrt((max_steps - step) / max_steps), min_lr), counted from
#   step 0, not from the warm-up's end: sqrt_annealing;
# - PolynomialDecayAnnealing: min_lr + (lr - min_lr) x (1 - p)^power over the steps after
#   the warm-up: polynomial (linear for power 1). `cycle` restarts the decay only past
#   max_steps, where WarmupPolicy returns min_lr: within the run it changes nothing;
# - NoamAnnealing: lr x d_model^-0.5 x min(step^-0.5, step x warmup^-1.5), at least min_lr
#   after the warm-up: linear up to lr / sqrt(d_model x warmup) at the warm-up's end (the
#   peak), then inverse_sqrt clamped at min_lr.
_NEMO_SHAPES = {
    "warmuppolicy": "constant", "warmupholdpolicy": "constant", "warmupannealing": "linear",
    "inversesquarerootannealing": "inverse_sqrt", "squarerootannealing": "sqrt_annealing",
    "polynomialdecayannealing": "polynomial", "noamannealing": "inverse_sqrt",
}  # fmt: skip


def _nemo_name(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) and value.lower() in _NEMO_SHAPES else None


def _nemo(look: _Lookup, warm: int | None) -> dict[str, Any]:
    """The canonical schedule of a NeMo scheduler (above); {} for none of them."""
    name = look.get("nemo_scheduler", _nemo_name)
    if name is None:
        return {}
    out: dict[str, Any] = {"lr_schedule": _NEMO_SHAPES[name]}
    if name == "polynomialdecayannealing":
        power = look.get("nemo_power", _number)
        power = 1.0 if power is None else power
        out.update({"lr_schedule": "linear"} if power == 1 else {"lr_decay_power": power})
    if name == "noamannealing":
        out.update(_noam(look, warm))
    return out


def _noam(look: _Lookup, warm: int | None) -> dict[str, Any]:
    """NoamAnnealing's peak, lr / sqrt(d_model x warmup): its `lr` is a scale, not the peak.
    Without a warm-up its LR falls from step 1 on (no shape computed here)."""
    if not warm:
        return {"lr_schedule": None}
    d_model, lr = look.get("nemo_d_model", _positive_int), look.get("peak_lr", _number)
    peak = float(f"{lr * (d_model * warm) ** -0.5:.12g}") if d_model and lr else None
    return {"peak_lr": peak, "lr_floor_clamp": True}


def _framework_schedules(flat: dict[str, Any], look: _Lookup, found: dict[str, Any]) -> None:
    """Where a framework's keys mean something else than their spelling says elsewhere."""
    deepspeed = _deepspeed(look)
    found.update(deepspeed)
    if deepspeed or _is_deepspeed(flat):
        found.update(_deepspeed_batch(look))
    found.update(_torchtitan(flat, look))
    found.update(_nemo(look, found.get("warmup_steps")))
    if found.get("lr_decay_steps") is None:
        found["lr_decay_steps"] = _nemo_decay_end(look, found.get("total_steps"))


def add_canonical(flat: dict[str, Any]) -> dict[str, Any]:
    """Return `flat` plus every canonical key that can be found or computed."""
    look = _Lookup(flat)
    found: dict[str, Any] = {
        "peak_lr": look.get("peak_lr", _number),
        "min_lr": _min_lr(look),
        "grad_clip": _grad_clip(look),
        "seed": look.get("seed", _nonneg_int),
        "vocab_size": look.get("vocab_size", _positive_int),
        "lr_schedule": look.get("lr_schedule", schedule_name),
        "lr_decay_steps": look.get("lr_decay_steps", _positive_steps),
        "lr_wsd_decay_steps": look.get("lr_wsd_decay_steps", _positive_steps),
        "lr_wsd_decay_shape": look.get("lr_wsd_decay_shape", _wsd_shape),
        **_derived(look),
    }
    _framework_schedules(flat, look, found)
    out = dict(flat)
    for key, value in found.items():
        if value is None:
            continue
        if key in out and out[key] != value:
            out[f"{key}_raw"] = out[key]
        out[key] = value
    return out

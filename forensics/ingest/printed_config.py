"""A run's config as its own text log printed it at start-up.

Many loops print their config once before the first step, and often that is the only place
a run's β2, precision, warm-up or vocabulary size is written down. The text readers
(textlog, generic_text) read it from the head of the log in two shapes:

- a Python repr of a config object (its class named as one: `...Config`, `...Arguments`,
  `Namespace`, `...Params`; not a printed model's `Linear(in_features=768, ...)`), nested
  objects included: OLMo's
  `TrainConfig(run_name='x', model=ModelConfig(vocab_size=50280, ...),
  optimizer=OptimizerConfig(betas=(0.9, 0.95), ...), ...)`, argparse's printed
  `Namespace(lr=0.0003, ...)`, and Hugging Face's `TrainingArguments(` printout, one
  `key=value,` per line with strings unquoted. Values are read as Python literals where
  they are ones, else kept as the printed text (an enum's `<ShardingStrategy.FULL: 1>`, a
  path), so an odd value never loses the rest;
- a two-column `| key | value |` table: llm.c's `| learning rate (LR) | 6.000000e-04 |`.
  Its key is the text without a parenthesised or one/two-letter symbol suffix
  (`sequence length T` -> `sequence_length`). llm.c's `total batch size` counts tokens
  (a multiple of the sequence length), so it is read as tokens per step;
- DeepSpeed's engine configuration (`DeepSpeedEngine configuration:`, before 0.3
  `DeepSpeedLight configuration:`): one `  name ........ value` line per setting
  (`bf16_enabled` / `bfloat16_enabled`, `fp16_enabled`, `optimizer_params {'lr': ...,
  'betas': [...]}`, `scheduler_name WarmupLR`, `scheduler_params {...}`,
  `gradient_clipping`, `train_batch_size` ...), then `json = {` and the user's whole
  ds_config. Both are read back into the ds_config they came from (the printed settings
  over the JSON: they are what the engine resolved), so the run config is what a
  `ds_config.json` beside the log would give (config._deepspeed).

The found keys go through config.add_canonical like any config file's.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from forensics.ingest.config import add_canonical, flatten

# The config is printed before the first step; a long preamble of warnings comes first.
HEAD_CHARS = 262_144
# A repr worth reading names at least this many fields (not a `Tensor(x=1)` in a message).
MIN_FIELDS = 3
# No config repr is longer (HF's TrainingArguments prints ~6 KB): a bracket left open in a
# message costs one bounded scan, not one to the end of the head per such message.
MAX_REPR_CHARS = 65_536
_CALL = re.compile(r"\b([A-Z][A-Za-z0-9_]*)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")
# A config object's class says so (TrainConfig, TrainingArguments, Namespace, SFTConfig,
# Hyperparameters); a printed model's modules (`Linear(in_features=768, ...)`) do not.
_CONFIG_CLASS = re.compile(
    r"(Config|Cfg|Args|Arguments|Namespace|Params|Parameters|Hyperparameters|Settings|Options)$"
)
_BRACKET = re.compile(r"[()'\"\n]")
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")
_SYMBOL = re.compile(r"(\s*\([^)]*\)|\s+[A-Z]{1,2}[a-z]?)+$")
_CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


def printed_config(text: str) -> dict[str, Any]:
    """Canonical config (config.add_canonical) from what the log's head printed; {} if none."""
    head = text[:HEAD_CHARS]
    found: dict[str, Any] = {}
    for fields in (_deepspeed(head), *_reprs(head), _table(head)):
        for key, value in flatten(fields).items():
            found.setdefault(key, value)
    return add_canonical(found) if found else {}


def _reprs(head: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    closers = _closers(head)
    pos = 0
    while m := _CALL.search(head, pos):
        pos = m.end()
        close = closers.get(m.end(1))
        if close is None or close - m.end(1) > MAX_REPR_CHARS:
            continue  # never closed: a message, not a config (and no scan to the end)
        parsed = _Parser(head, m.end(1) + 1, close + 1).call()
        if parsed is None:
            continue
        fields, end = parsed
        config_class = _CONFIG_CLASS.search(m.group(1)) is not None
        if config_class and len(fields) >= MIN_FIELDS and not _record(fields):
            out.append(fields)
            pos = end
    return out


def _closers(head: str) -> dict[int, int]:
    """Index of each '(' -> index of its ')', quoted strings closed on their line skipped:
    one pass over the head, so a log full of unclosed brackets costs no rescans."""
    out: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while m := _BRACKET.search(head, i):
        c, i = m.group(), m.end()
        if c == "(":
            stack.append(m.start())
        elif c == ")" and stack:
            out[stack.pop()] = m.start()
        elif c in "'\"":
            i = max(_string_end(head, m.start(), len(head)), i)
        elif c == "\n" and len(stack) > 64:
            stack.clear()  # deeper than any config: unbalanced text
    return out


def _record(fields: dict[str, Any]) -> bool:
    """A step's record printed as a repr (`Metrics(step=10, loss=2.3, lr=3e-4)`): its
    numbers are that step's, not the run's config."""
    return any(isinstance(fields.get(k), int | float) for k in _RECORD_KEYS)


_RECORD_KEYS = ("loss", "train_loss", "step", "global_step", "iter", "iteration")


class _Parser:
    """`key=value, ...)` from position i (just after a call's opening parenthesis)."""

    def __init__(self, s: str, i: int, end: int | None = None) -> None:
        self.s, self.i = s, i
        self.end = end if end is not None else min(len(s), i + MAX_REPR_CHARS)

    def call(self) -> tuple[dict[str, Any], int] | None:
        fields: dict[str, Any] = {}
        while True:
            self._space()
            if self._peek() == ")":
                return fields, self.i + 1
            m = _KEY.match(self.s, self.i)
            if not m:
                return None
            self.i = m.end()
            value = self._value()
            if value is _FAIL:
                return None
            fields[m.group(1)] = value
            self._space()
            if self._peek() == ",":
                self.i += 1
            elif self._peek() != ")":
                return None

    def _value(self) -> Any:
        self._space()
        nested = _CALL.match(self.s, self.i)
        if nested:
            inner = _Parser(self.s, nested.end(1) + 1, self.end).call()
            if inner is None:
                return _FAIL
            self.i = inner[1]
            return inner[0]
        start = self.i
        end = self._token_end()
        if end is None:
            return _FAIL
        self.i = end
        return _literal(self.s[start:end].strip())

    def _token_end(self) -> int | None:
        """End of one value: balanced brackets and quotes, up to a top-level , or )."""
        depth: list[str] = []
        i, s = self.i, self.s
        while i < self.end:
            c = s[i]
            if c in "'\"":  # a quote left open on its line is a character (HF: Bob's run)
                i = max(_string_end(s, i, self.end), i + 1)
                continue
            if c in _CLOSE and (c != "<" or not depth):
                depth.append(_CLOSE[c])
            elif depth and c == depth[-1]:
                depth.pop()
            elif not depth and (c in ",)" or (c == "\n" and s[i - 1 : i] == ",")):
                return i
            i += 1
        return None

    def _space(self) -> None:
        while self.i < self.end and self.s[self.i].isspace():
            self.i += 1

    def _peek(self) -> str:
        return self.s[self.i] if self.i < self.end else ""


_FAIL = object()


def _string_end(s: str, i: int, end: int) -> int:
    """Index just after the quoted string that starts at i (-1: not closed on its line)."""
    q, j = s[i], i + 1
    while j < end:
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == q:
            return j + 1
        if s[j] == "\n":
            return -1
        j += 1
    return -1


def _literal(text: str) -> Any:
    """A Python literal where the text is one (numbers, strings, tuples, None), else the
    text itself (an unquoted path, an enum's repr)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _table(head: str) -> dict[str, Any]:
    """A `| key | value |` table's rows (llm.c's start-up table)."""
    rows: dict[str, Any] = {}
    for line in head.splitlines():
        t = line.strip()
        if not (t.startswith("|") and t.endswith("|") and t.count("|") == 3):
            continue
        key, value = (part.strip() for part in t[1:-1].split("|"))
        name = re.sub(r"[^a-z0-9]+", "_", _SYMBOL.sub("", key).lower()).strip("_")
        if name and value and name not in ("parameter", "key", "name"):
            rows.setdefault(name, _literal(value) if value[:1] in "-.0123456789" else value)
    total, seq = rows.get("total_batch_size"), rows.get("sequence_length")
    if isinstance(total, int) and isinstance(seq, int) and seq > 1 and total % seq == 0:
        rows["tokens_per_step"] = rows.pop("total_batch_size")  # llm.c counts tokens
        rows["global_batch_size"] = total // seq  # sequences; its micro batch is per pass
    return rows


# ----- DeepSpeed's printed engine configuration -------------------------------------------

# deepspeed/runtime/config.py, DeepSpeedConfig.print: `logger.info("{}:".format(name))`, then
# for each attribute `"  {} {} {}".format(arg, "." * (29 - len(arg)), value)` (no dots for a
# name of 29 characters or more), then `"  json = {}".format(json.dumps(user config,
# indent=4))`. Only rank 0 prints it; `[config.py:N:print]` tags each line since 0.3.
_DS_HEADER = re.compile(r"DeepSpeed(?:Engine|Light) configuration:")
_DS_TAG = re.compile(r"\[config\.py:\d+:print\]")
_DS_SETTING = re.compile(r"\s\s([a-z][a-z0-9_]*) (?:\.+ )?\s?(.*?)\s*$")  # dots or 2 spaces
_DS_JSON = re.compile(r"\bjson = (\{.*)$")
_PDSH = re.compile(r"^[\w.\-]+: ")  # pdsh's `worker-0: ` before each line of a node
# The block is ~100 lines, with a few multi-line JSON values; its user JSON is short too.
_DS_MAX_LINES = 2000


def _deepspeed(head: str) -> dict[str, Any]:
    """The ds_config DeepSpeed's engine printed (module docstring); {} for none."""
    header = _DS_HEADER.search(head)
    start = header or _DS_TAG.search(head)  # a log cut above the header: its tagged lines
    if start is None:
        return {}
    lines = head[start.start() :].splitlines()[:_DS_MAX_LINES]
    printed: dict[str, str] = {}
    user: dict[str, Any] = {}
    for i, line in enumerate(lines):
        json_start = _DS_JSON.search(line)
        if json_start is not None:
            user = _ds_user_json(json_start.group(1), line, lines[i + 1 :])
            break
        m = _DS_SETTING.search(line)
        if m is None or m.group(1) not in _DS_SETTINGS:
            continue
        if header is not None or _DS_TAG.search(line):
            printed.setdefault(m.group(1), m.group(2))
    return _merge(user, _ds_config(printed))


def _ds_user_json(first: str, line: str, rest: list[str]) -> dict[str, Any]:
    """The user's ds_config after `json = `: lines until the braces close (pdsh's node
    prefix taken off each); {} when it does not parse (lines of other ranks in between)."""
    prefix = _PDSH.match(line)
    body = [first]
    depth = first.count("{") - first.count("}")
    for nxt in rest:
        if depth <= 0:
            break
        if prefix is not None and nxt.startswith(prefix.group()):
            nxt = nxt[prefix.end() :]
        body.append(nxt)
        depth += nxt.count("{") - nxt.count("}")
    try:
        parsed = json.loads("\n".join(body))
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


# Printed attribute -> where the same setting sits in a ds_config.json. Precision: older
# DeepSpeed prints `bf16_enabled`, newer `bfloat16_enabled`, the newest `float16_config
# enabled=True ...` (a pydantic model's repr) beside the flags.
_DS_SETTINGS: dict[str, tuple[str, ...]] = {
    "bf16_enabled": ("bf16", "enabled"),
    "bfloat16_enabled": ("bf16", "enabled"),
    "bfloat16_config": ("bf16", "enabled"),
    "fp16_enabled": ("fp16", "enabled"),
    "float16_config": ("fp16", "enabled"),
    "optimizer_name": ("optimizer", "type"),
    "optimizer_params": ("optimizer", "params"),
    "scheduler_name": ("scheduler", "type"),
    "scheduler_params": ("scheduler", "params"),
    "gradient_clipping": ("gradient_clipping",),
    "gradient_accumulation_steps": ("gradient_accumulation_steps",),
    "train_batch_size": ("train_batch_size",),
    "train_micro_batch_size_per_gpu": ("train_micro_batch_size_per_gpu",),
    "zero_optimization_stage": ("zero_optimization", "stage"),
}
_ENABLED = re.compile(r"^enabled=(True|False)\b")


def _ds_config(printed: dict[str, str]) -> dict[str, Any]:
    """The printed settings placed as a ds_config.json holds them. Left out: `None` (no
    optimizer or scheduler of DeepSpeed's: the client's), unreadable values, and a
    `gradient_clipping` of 0.0, DeepSpeed's default when the JSON sets none: no clipping."""
    out: dict[str, Any] = {}
    for name, text in printed.items():
        value = _ds_value(name, text)
        if value is None:
            continue
        *parents, leaf = _DS_SETTINGS[name]
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node.setdefault(leaf, value)
    return out


def _ds_value(name: str, text: str) -> Any:
    """A printed setting's value (None: left out, _ds_config)."""
    if name.endswith("_config"):  # `enabled=True auto_cast=False ...`
        enabled = _ENABLED.match(text)
        return None if enabled is None else enabled.group(1) == "True"
    value = _literal(text)
    if name.endswith("_params") and not isinstance(value, dict):
        return None
    return None if name == "gradient_clipping" and value == 0 else value


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s values in their place, nested mappings merged."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            value = _merge(old, value)
        out[key] = value
    return out

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
  (a multiple of the sequence length), so it is read as tokens per step.

The found keys go through config.add_canonical like any config file's.
"""

from __future__ import annotations

import ast
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
    for fields in (*_reprs(head), _table(head)):
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

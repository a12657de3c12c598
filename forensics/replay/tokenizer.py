"""Decoded excerpts of a batch's most anomalous sequences, with the run's own tokenizer.

A post-mortem that says "rare tokens" convinces when it shows them: the rows of the offending
batch whose tokens are rarest in training (lowest mean log unigram probability) are decoded
with the run's `tokenizer.json` through `tokenizers` (no transformers needed). Without a
tokenizer the numbers say so in one line and show the raw ids instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from forensics.replay.freq import Freq, short

N_ROWS = 3
MAX_TOKENS = 48


def load_tokenizer(paths: list[Path]) -> tuple[Any, str | None]:
    """The first readable tokenizer.json among `paths` (and the path), or (None, why)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None, "tokenizers not installed (pip install -e '.[hf]')"
    for p in paths:
        if p.is_file():
            try:
                return Tokenizer.from_file(str(p)), short(p)
            except Exception:  # a broken file: try the next one
                continue
    looked = ", ".join(short(p) for p in paths) or "nowhere (no --tokenizer, no checkpoint folder)"
    return None, f"no tokenizer.json found (looked at {looked})"


def excerpts(tokens: np.ndarray, freq: Freq | None, paths: list[Path]) -> dict[str, Any]:
    """numbers for the post-mortem: `excerpts` (decoded text), `excerpt_rows`, and
    `tokenizer` (its path) or `excerpts_note` (why the ids are shown raw)."""
    if tokens.size == 0:
        return {}
    vocab = int(tokens.max()) + 1
    if freq is not None:
        score = np.log(freq.prob(tokens.ravel(), vocab)).reshape(tokens.shape).mean(axis=1)
        rows = np.argsort(score, kind="stable")[:N_ROWS]
        order = "rarest rows first, by mean log unigram probability"
    else:
        rows = np.arange(min(N_ROWS, tokens.shape[0]))
        order = "the first rows, unranked: no token counts"
    tok, where = load_tokenizer(paths)
    ids = [tokens[int(r), :MAX_TOKENS].tolist() for r in rows]
    out: dict[str, Any] = {
        "excerpt_rows": [int(r) for r in rows],
        "excerpt_order": order,
        "excerpt_tokens": [len(i) for i in ids],  # tokens shown per row (of `row_tokens`)
        "row_tokens": int(tokens.shape[1]),
    }
    if tok is None:
        return out | {"excerpts_note": where, "excerpt_ids": ids}
    return out | {
        "excerpts": [tok.decode(i, skip_special_tokens=False) for i in ids],
        "tokenizer": where,
    }

"""A small, safe expression language for rule conditions (no Python eval).

    condition := or
    or        := and ("or" and)*
    and       := not ("and" not)*
    not       := "not" not | test
    test      := sum (CMP sum | "in" "[" sum ("," sum)* "]")?
               | NAME "is" ["not"] "missing"
    sum       := term (("+" | "-") term)*
    term      := unary (("*" | "/") unary)*
    unary     := "-" unary | atom
    atom      := NUMBER | STRING | "true" | "false" | "inf" | NAME | FUNC "(" sum ("," sum)* ")"
               | "(" condition ")"
    CMP       := "<" | "<=" | ">" | ">=" | "==" | "!="       FUNC := min | max | abs

Names are incident features (features.FEATURES); an unknown name is an error when the rule
is loaded. A missing feature (None) makes every comparison that uses it unknown, and
unknown is not true: `and`/`or`/`not` follow three-valued (Kleene) logic, so
`beta2 is missing or beta2 <= 0.98` is true when beta2 was not logged, and
`not (beta2 >= 0.99)` is not.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Value = float | str | bool | None

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<str>\"[^\"]*\"|'[^']*')"
    r"|(?P<op><=|>=|==|!=|<|>|\+|-|\*|/|\(|\)|\[|\]|,)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))"
)
_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
}
_FUNCS: dict[str, Callable[..., float]] = {"min": min, "max": max, "abs": abs}
_KEYWORDS = {"and", "or", "not", "in", "is", "missing", "true", "false", "inf"}


class ExprError(ValueError):
    """The condition text is not a valid expression (message says where)."""


@dataclass(frozen=True)
class Node:
    """One node of the parsed expression: op and its operands (children or a literal)."""

    op: str
    args: tuple[Any, ...]


def tokenize(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:].strip()[:1]!r} at {pos}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.names: set[str] = set()

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None, *, what: str = "more") -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ExprError(f"unexpected end of expression (expected {expected or what})")
        tok = self.toks[self.i]
        if expected is not None and tok[1] != expected:
            raise ExprError(f"expected {expected!r} but found {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.or_()
        if self.i != len(self.toks):
            raise ExprError(f"unexpected {self.toks[self.i][1]!r} after a complete expression")
        return node

    def _chain(self, word: str, sub: Callable[[], Node]) -> Node:
        node = sub()
        while self.peek() == word:
            self.take()
            node = Node(word, (node, sub()))
        return node

    def or_(self) -> Node:
        return self._chain("or", self.and_)

    def and_(self) -> Node:
        return self._chain("and", self.not_)

    def not_(self) -> Node:
        if self.peek() == "not":
            self.take()
            return Node("not", (self.not_(),))
        return self.test()

    def test(self) -> Node:
        if self.i + 1 < len(self.toks) and self.toks[self.i + 1][1] == "is":
            kind, name = self.take()
            if kind != "name" or name in _KEYWORDS:
                raise ExprError(f"'is missing' needs a feature name, not {name!r}")
            self.take("is")
            negate = self.peek() == "not" and bool(self.take())
            self.take("missing")
            self.names.add(name)
            return Node("present" if negate else "missing", (name,))
        left = self.sum_()
        op = self.peek()
        if op in _CMP:
            self.take()
            return Node("cmp", (op, left, self.sum_()))
        if op == "in":
            self.take()
            return Node("in", (left, self._list("[", "]")))
        return left

    def _list(self, open_: str, close: str) -> tuple[Node, ...]:
        self.take(open_)
        items = [self.sum_()]
        while self.peek() == ",":
            self.take()
            items.append(self.sum_())
        self.take(close)
        return tuple(items)

    def sum_(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            node = Node("arith", (op, node, self.term()))
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()[1]
            node = Node("arith", (op, node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.peek() == "-":
            self.take()
            return Node("arith", ("-", Node("lit", (0.0,)), self.unary()))
        return self.atom()

    def atom(self) -> Node:
        kind, tok = self.take(what="a value")
        if kind == "num":
            return Node("lit", (float(tok),))
        if kind == "str":
            return Node("lit", (tok[1:-1],))
        if tok == "(":
            node = self.or_()
            self.take(")")
            return node
        if kind != "name":
            raise ExprError(f"expected a value but found {tok!r}")
        if tok in ("true", "false"):
            return Node("lit", (tok == "true",))
        if tok == "inf":
            return Node("lit", (math.inf,))
        if tok in _FUNCS and self.peek() == "(":
            return Node("call", (tok, self._list("(", ")")))
        if tok in _KEYWORDS:
            raise ExprError(f"keyword {tok!r} cannot be used as a value")
        self.names.add(tok)
        return Node("name", (tok,))


@dataclass(frozen=True)
class Expression:
    """A parsed condition: evaluate it against a mapping of feature values."""

    text: str
    root: Node
    names: frozenset[str]

    def evaluate(self, features: Mapping[str, Any]) -> bool | None:
        """True, False, or None when it depends on a missing feature."""
        v = _eval(self.root, features)
        return None if v is None else bool(v)


def parse(text: str) -> Expression:
    if not isinstance(text, str) or not text.strip():
        raise ExprError("empty condition")
    p = _Parser(text)
    root = p.parse()
    return Expression(text, root, frozenset(p.names))


def _eval(node: Node, f: Mapping[str, Any]) -> Value:
    op, a = node.op, node.args
    if op == "lit":
        return a[0]  # type: ignore[no-any-return]
    if op == "name":
        return f.get(a[0])  # type: ignore[no-any-return]
    if op in ("missing", "present"):
        return (f.get(a[0]) is None) == (op == "missing")
    if op in ("and", "or", "not"):
        return _logic(op, [_eval(x, f) for x in a])
    if op == "in":
        left, items = _eval(a[0], f), [_eval(x, f) for x in a[1]]
        return None if left is None else any(left == x for x in items)
    if op == "call":
        args = [_eval(x, f) for x in a[1]]
        return None if any(v is None for v in args) else _FUNCS[a[0]](*args)
    x, y = _eval(a[1], f), _eval(a[2], f)
    if x is None or y is None:
        return None
    return _compare(a[0], x, y) if op == "cmp" else _arith(a[0], x, y)


def _arith(op: str, x: Value, y: Value) -> float | None:
    if isinstance(x, str) or isinstance(y, str):
        return None
    return _ARITH[op](float(x), float(y))  # type: ignore[arg-type]


def _compare(op: str, x: Value, y: Value) -> bool | None:
    if isinstance(x, str) != isinstance(y, str):
        return op == "!="
    try:
        return _CMP[op](x, y)
    except TypeError:
        return None


def _logic(op: str, vals: list[Value]) -> bool | None:
    """Kleene three-valued logic: None is 'unknown'."""
    if op == "not":
        return None if vals[0] is None else not vals[0]
    if op == "and":
        if any(v is not None and not v for v in vals):
            return False
        return None if any(v is None for v in vals) else True
    if any(v is not None and v for v in vals):
        return True
    return None if any(v is None for v in vals) else False

"""A small parser for protocol-buffer text format (``.txtpb``/``.pbtxt``), enough for XLA's perf tables.

Text format grammar (https://protobuf.dev/reference/protobuf/textformat-spec/): a message is a sequence of
fields; a field is ``name: scalar``, ``name: [scalar, ...]``, ``name { message }``, ``name: { message }`` or
``name < message >``; ``#`` starts a comment; fields may be separated by ``,`` or ``;``. Scalars are quoted
strings (C escapes, adjacent strings concatenate), numbers, or identifiers (enum values, ``true``/``false``).
A map field is a repeated message with ``key`` and ``value``. Without the ``.proto`` schema every field is
treated as repeated: :func:`parse` returns ``{name: [value, ...]}`` and :func:`first` picks the single value.
"""

from __future__ import annotations

import re
from typing import Any

from hybrid.errors import ImportFormatError

Message = dict[str, list[Any]]

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fFuUlL]*(?![\w.]))
  | (?P<ident>[-+]?[A-Za-z_][\w.]*|\[[\w./]+\])
  | (?P<punct>[{}<>\[\]:,;])
    """,
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "?": "?"}


def _unescape(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1:])
            out.append(chr(int(m.group(0), 8)))  # type: ignore[union-attr]
            i += 1 + len(m.group(0))  # type: ignore[union-attr]
        elif nxt in "xX":
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:])
            out.append(chr(int(m.group(0), 16)))  # type: ignore[union-attr]
            i += 2 + len(m.group(0))  # type: ignore[union-attr]
        else:
            out.append(nxt)
            i += 2
    return "".join(out)


def _scalar(kind: str, text: str) -> Any:
    if kind == "number":
        t = text.rstrip("fFuUlL") if not text.lower().startswith(("0x", "-0x", "+0x")) else text
        if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", t):
            return int(t, 16)
        if re.fullmatch(r"[-+]?\d+", t):
            return int(t)
        return float(t)
    if kind == "ident":
        low = text.lower()
        if low in ("true", "t"):
            return True
        if low in ("false", "f"):
            return False
        if low in ("inf", "infinity", "-inf", "-infinity", "nan"):
            return float(low)
        return text
    return text


class _Parser:
    def __init__(self, text: str, source: str):
        self.source = source
        self.tokens: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ImportFormatError(f"{source}: line {line}: unexpected character {text[pos]!r} in text proto")
            kind = m.lastgroup or ""
            if kind != "ws":
                self.tokens.append((kind, m.group(0), line))
            line += m.group(0).count("\n")
            pos = m.end()
        self.i = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _next(self, what: str) -> tuple[str, str, int]:
        tok = self._peek()
        if tok is None:
            last = self.tokens[-1][2] if self.tokens else 1
            raise ImportFormatError(f"{self.source}: line {last}: file ends inside a message (expected {what}); "
                                    "truncated?")
        self.i += 1
        return tok

    def message(self, close: str | None) -> Message:
        msg: Message = {}
        while True:
            tok = self._peek()
            if tok is None:
                if close is not None:
                    self._next(f"'{close}'")
                return msg
            kind, text, line = tok
            if kind == "punct" and text == close:
                self.i += 1
                return msg
            if kind == "punct" and text in ",;":
                self.i += 1
                continue
            if kind != "ident":
                raise ImportFormatError(f"{self.source}: line {line}: expected a field name, got {text!r}")
            self.i += 1
            name = text
            kind2, text2, line2 = self._next(f"':' or '{{' after {name}")
            if kind2 == "punct" and text2 == ":":
                kind2, text2, line2 = self._next(f"a value for {name}")
            if kind2 == "punct" and text2 in "{<":
                value: Any = self.message("}" if text2 == "{" else ">")
                msg.setdefault(name, []).append(value)
            elif kind2 == "punct" and text2 == "[":
                msg.setdefault(name, []).extend(self._list(name))
            elif kind2 in ("number", "ident"):
                msg.setdefault(name, []).append(_scalar(kind2, text2))
            elif kind2 == "string":
                parts = [_unescape(text2[1:-1])]
                while (nxt := self._peek()) is not None and nxt[0] == "string":
                    parts.append(_unescape(nxt[1][1:-1]))
                    self.i += 1
                msg.setdefault(name, []).append("".join(parts))
            else:
                raise ImportFormatError(f"{self.source}: line {line2}: unexpected {text2!r} after field {name}")

    def _list(self, name: str) -> list[Any]:
        out: list[Any] = []
        while True:
            kind, text, line = self._next(f"']' closing the list of {name}")
            if kind == "punct" and text == "]":
                return out
            if kind == "punct" and text == ",":
                continue
            if kind == "punct" and text in "{<":
                out.append(self.message("}" if text == "{" else ">"))
            elif kind == "string":
                out.append(_unescape(text[1:-1]))
            elif kind in ("number", "ident"):
                out.append(_scalar(kind, text))
            else:
                raise ImportFormatError(f"{self.source}: line {line}: unexpected {text!r} in list {name}")


def parse(text: str, source: str = "<text proto>") -> Message:
    """Parse protobuf text format into nested ``{field: [values]}`` dictionaries."""
    return _Parser(text, source).message(None)


def first(msg: Message, name: str, default: Any = None) -> Any:
    """The (last, as protobuf does for singular fields) value of ``name``, or ``default`` if absent."""
    values = msg.get(name)
    return values[-1] if values else default


def map_entries(msg: Message, name: str) -> dict[Any, Any]:
    """A protobuf map field (repeated ``{key: .. value: ..}``) as a dict."""
    return {first(e, "key"): first(e, "value") for e in msg.get(name, [])}

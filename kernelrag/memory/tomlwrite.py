"""A small TOML writer for skill.toml files (the standard library only reads TOML).

``dumps(data)`` writes top-level keys first, then one ``[table]`` per dict
(nested dicts as ``[table.sub]``); lists are inline arrays, dicts inside lists
inline tables; ``None`` values are left out (TOML has no null).
``update_table(text, table, values)`` edits one table of an existing file in
place, keeping the rest of the file (comments included) as written.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
import tomllib
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def value(v: Any) -> str:
    """One TOML value, inline."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(str(k))} = {value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"cannot write {type(v).__name__} value {v!r} as TOML")


def _key_lines(d: dict[str, Any]) -> list[str]:
    return [f"{_key(str(k))} = {value(v)}" for k, v in d.items()
            if v is not None and not isinstance(v, dict)]


def dumps(data: dict[str, Any]) -> str:
    lines = _key_lines(data)

    def tables(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                name = f"{prefix}{_key(str(k))}"
                if lines:
                    lines.append("")
                lines.append(f"[{name}]")
                lines.extend(_key_lines(v))
                tables(v, name + ".")

    tables(data, "")
    return "\n".join(lines) + "\n"


def _header(line: str) -> str | None:
    m = re.match(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$", line)
    return m.group(1).strip() if m else None


def update_table(text: str, table: str, values: dict[str, Any], replace: bool = False) -> str:
    """Set keys of ``[table]`` in TOML ``text``; ``replace=True`` replaces the whole table body.

    The rest of the file is kept as written. Falls back to a full rewrite (which
    drops comments) only if the in-place edit would not parse to the wanted values.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _header(ln) == table), None)
    new_lines = _key_lines(values)
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        out = lines + ([""] if lines else []) + [f"[{table}]"] + new_lines
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        body = lines[start + 1:end]
        trailing = []
        while body and not body[-1].strip():
            trailing.insert(0, body.pop())
        if replace:
            body = new_lines
        else:
            for key, line in zip([k for k, v in values.items() if v is not None and not isinstance(v, dict)],
                                 new_lines):
                pat = re.compile(rf"^\s*{re.escape(_key(str(key)))}\s*=")
                hit = next((i for i, ln in enumerate(body) if pat.match(ln)), None)
                if hit is None:
                    body.append(line)
                else:
                    body[hit] = line
        out = lines[:start + 1] + body + trailing + lines[end:]
    result = "\n".join(out) + "\n"
    want = {k: v for k, v in values.items() if v is not None}
    try:
        got = tomllib.loads(result).get(table, {})
        ok = all(got.get(k) == _roundtrip(v) for k, v in want.items())
        if replace:
            ok = ok and set(got) == set(want)
    except tomllib.TOMLDecodeError:
        ok = False
    if ok:
        return result
    data = tomllib.loads(text)
    data[table] = dict(want) if replace else {**data.get(table, {}), **want}
    return dumps(data)


def _roundtrip(v: Any) -> Any:
    return tomllib.loads(f"x = {value(v)}")["x"]

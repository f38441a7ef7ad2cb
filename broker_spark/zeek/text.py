"""How Zeek's JSON log writer spells values: strings, doubles, times and addresses.

Zeek writes its JSON lines with rapidjson behind its own escaping (read from
zeek/zeek: ``src/threading/formatters/JSON.cc``, ``util::escape_utf8``,
``zeek_inet_ntop``, rapidjson's ``Writer``). What users compare against is
those lines, so each rule here follows Zeek:

* strings (``escape_utf8`` with ``ESCAPE_UNPRINTABLE_CONTROLS``): kept as they
  are unless they hold a *bad* sequence (invalid UTF-8, a control other than
  ``\\b \\f \\n \\r \\t``, DEL, a C1 control, a private-use character or
  U+FFF0 to U+FFFF); then the whole string is re-spelt with every byte from
  0x80 up and every bad control as the four characters ``\\xNN``. JSON then
  escapes ``"`` and ``\\`` and the five short controls.
* doubles (rapidjson's ``Writer::Double``): the digits of the shortest form
  that reads back as the same double, laid out as rapidjson does: ``3600.0``,
  ``0.00001``, ``1e-7``, ``1.5e30``, ``100000000000000000000.0``; NaN and
  infinities as ``null``. rapidjson finds its digits with Grisu2, which for a
  few doubles in a thousand gives a longer digit string than the shortest;
  such a value reads back as the same double either way.
* times: epoch seconds (a double) by default; ISO 8601 with microseconds,
  rounded, as Zeek prints them (a fraction rounding to a whole second shows
  seven digits, as in Zeek); or milliseconds, truncated.
* IPv6 addresses as ``zeek_inet_ntop`` writes them: lower-case hex, the first
  longest run of two or more zero words as ``::``, and an IPv4 tail for
  ``::a.b.c.d``, ``::ffff:a.b.c.d`` and ``::ffff:0:a.b.c.d``.
"""

from __future__ import annotations

import math
import re
import time
from typing import Final

__all__ = [
    "TIMESTAMP_FORMATS",
    "addr_text",
    "format_double",
    "format_time",
    "iso8601",
    "json_quote",
    "zeek_text",
]

#: The values of ``LogAscii::json_timestamps``, by the names we take.
TIMESTAMP_FORMATS: Final = ("epoch", "iso8601", "millis", "millis-unsigned")

_SHORT_CONTROLS = frozenset(b"\b\f\n\r\t")
_PRINTABLE = re.compile(rb"[\x20-\x7e]*\Z")


def _bad_char(ch: str) -> bool:
    o = ord(ch)
    if o < 0x20:
        return o not in _SHORT_CONTROLS
    return (
        o == 0x7F
        or 0x80 <= o <= 0x9F
        or 0xE000 <= o <= 0xF8FF
        or 0xFFF0 <= o <= 0xFFFF
        or 0xD800 <= o <= 0xDFFF
    )


_HEX = [f"\\x{i:02x}" for i in range(256)]


def zeek_text(raw: bytes | str) -> str:
    """The text Zeek's JSON writer holds for a string's bytes (before JSON's own escaping)."""
    if isinstance(raw, str):
        if raw.isascii() and raw.isprintable():
            return raw
        raw = raw.encode("utf-8", "surrogateescape")
    if _PRINTABLE.match(raw):
        return raw.decode("ascii")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not any(_bad_char(ch) for ch in text):
        return text
    return "".join(chr(b) if 0x20 <= b < 0x7F or b in _SHORT_CONTROLS else _HEX[b] for b in raw)


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_JSON_ESCAPES["\t"] = "\\t"
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _escape_match(m: re.Match[str]) -> str:
    ch = m.group()
    return _JSON_ESCAPES.get(ch) or f"\\u{ord(ch):04X}"


def json_quote(text: str) -> str:
    """``text`` as a JSON string the way rapidjson writes it (non-ASCII stays as it is)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_match, text) + '"'


def format_double(x: float) -> str:
    """A double as rapidjson's ``Writer::Double`` lays it out (``null`` for NaN and infinities)."""
    if not math.isfinite(x):
        return "null"
    text = repr(x)
    if "e" not in text and "n" not in text:
        return text  # Python's plain form (1e-4 <= |x| < 1e16) is rapidjson's too
    return _prettify(text)


def _prettify(text: str) -> str:
    """rapidjson's layout of the digits and exponent of Python's ``repr``."""
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    # value = 0.<all> x 10^(len(whole) + exponent); each leading zero moves the point left
    every = whole + frac
    significant = every.lstrip("0")
    if not significant.strip("0"):
        return sign + "0.0"
    kk = len(whole) + exponent - (len(every) - len(significant))
    digits = significant.rstrip("0")
    k = kk - len(digits)
    if k >= 0 and kk <= 21:
        return sign + digits + "0" * k + ".0"
    if 0 < kk <= 21:
        return sign + digits[:kk] + "." + digits[kk:]
    if -6 < kk <= 0:
        return sign + "0." + "0" * -kk + digits
    if len(digits) == 1:
        return f"{sign}{digits}e{kk - 1}"
    return f"{sign}{digits[0]}.{digits[1:]}e{kk - 1}"


def format_time(seconds: float, fmt: str = "epoch") -> str:
    """A ``time`` value as Zeek's JSON writer spells it for ``LogAscii::json_timestamps``."""
    if fmt == "epoch":
        return format_double(seconds)
    if fmt in ("millis", "millis-unsigned"):
        scaled = seconds * 1000
        if not math.isfinite(scaled):  # Zeek's int64 cast of these is undefined
            return "null"
        millis = int(scaled)
        if fmt == "millis-unsigned" and millis < 0:
            millis += 1 << 64
        return str(millis)
    if fmt == "iso8601":
        return '"' + iso8601(seconds) + '"'
    raise ValueError(f"unknown timestamp format {fmt!r}; expected one of {TIMESTAMP_FORMATS}")


def iso8601(seconds: float) -> str:
    """Zeek's ISO 8601 time: UTC, a ``T``, microseconds (rounded; no carry, as Zeek) and ``Z``."""
    if not math.isfinite(seconds):
        return "2000-01-01T00:00:00.000000"
    whole = math.floor(seconds)
    frac = seconds - whole
    try:
        head = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    except (OverflowError, OSError, ValueError):
        return "2000-01-01T00:00:00.000000"
    return f"{head}.{frac * 1e6:06.0f}Z"


def addr_text(raw: bytes) -> str:
    """An address's 4 or 16 bytes as Zeek writes them."""
    if len(raw) == 4:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}"
    words = [(raw[i] << 8) | raw[i + 1] for i in range(0, 16, 2)]
    best_start, best_len, start = -1, 0, -1
    for i, word in enumerate(words + [1]):
        if word == 0:
            if start < 0:
                start = i
        elif start >= 0:
            if i - start > best_len:
                best_start, best_len = start, i - start
            start = -1
    if best_len < 2:
        best_start, best_len = -1, 0
    if best_start == 0 and (
        best_len == 6
        or (best_len == 5 and words[5] == 0xFFFF)
        or (best_len == 4 and words[4] == 0xFFFF and words[5] == 0)
    ):
        tail = f"{raw[12]}.{raw[13]}.{raw[14]}.{raw[15]}"
        middle = ":".join(f"{w:x}" for w in words[best_len:6])
        return "::" + (middle + ":" if middle else "") + tail
    if best_start < 0:
        return ":".join(f"{w:x}" for w in words)
    left = ":".join(f"{w:x}" for w in words[:best_start])
    right = ":".join(f"{w:x}" for w in words[best_start + best_len :])
    return left + "::" + right

"""Zeek script types and event signatures, read from the text a Zeek script writes.

Why: Spark has no unsigned, address, port, subnet, interval or enum types,
and a Zeek converts what it receives with its own handler's declared types
(``to_zeek_event``): an ``integer`` where the handler takes a ``count`` is
rejected (``broker value '1' type 'integer' to Zeek type 'count count'
failed``). A writer must therefore know each argument's Zeek type, and the
one place a user has it is the event's declaration in their Zeek script. So
the ``signature`` option takes that declaration as Zeek writes it::

    Intel::seen(indicator: string, host: addr, p: port, n: count)

and :func:`parse_signature` reads it into an :class:`EventSignature`. Also
accepted: ``global NAME: event(...)`` and ``event NAME(...)``, so a line
copied from a script works. Composite types are written as in Zeek:
``set[addr]``, ``set[addr, port]``, ``table[string] of count``,
``vector of string``, ``record { a: count; b: string &optional; }`` and
``enum { RED, GREEN }`` (or plain ``enum``: any enum name), nested freely.

A record or enum that the script names is declared before the event, as
Zeek declares it, with ``;`` between declarations::

    type Holdout::Color: enum { RED, GREEN, BLUE };
    type Holdout::Inner: record { n: count; label: string &optional; };
    Holdout::ev(c: Holdout::Color, i: Holdout::Inner)

``module M;`` may precede declarations (then ``Color`` means ``M::Color``,
its names are ``M::RED``, and an unqualified event name is ``M::ev``, as in
Zeek), and ``export { ... }`` blocks are read as their contents. Zeek's
own typedefs that events use (``string_set``, ``addr_set``, ``index_vec``,
``string_vec``, ``transport_proto``, ``Log::ID``, ...) are known without a
declaration (:data:`BUILTIN_TYPES`). ``#`` starts a comment.

Attributes: ``&optional`` and ``&default=...`` make a record field
nullable (a null becomes Broker's ``none``, which Zeek reads as the field
being unset, so it takes its default); other attributes (``&log``) are
accepted and ignored. ``any`` means "whatever the column holds" (the
untyped mapping); writing the concrete type instead of ``any`` is allowed,
as the receiving handler converts the value anyway.

Every type renders back (``str()``) in Zeek's syntax, records and enums
inline, and parses to an equal type.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = [
    "BASIC_TYPES",
    "BUILTIN_TYPES",
    "Basic",
    "EnumType",
    "EventSignature",
    "Field",
    "RecordType",
    "ScriptType",
    "SetType",
    "SignatureError",
    "TableType",
    "VectorType",
    "parse_signature",
    "parse_type",
]

#: Zeek's atomic types that travel over Broker (``file``, ``func`` and opaques do not, usefully).
BASIC_TYPES = (
    "bool",
    "int",
    "count",
    "double",
    "time",
    "interval",
    "string",
    "pattern",
    "port",
    "addr",
    "subnet",
    "any",
)


class SignatureError(ValueError):
    """A signature or type that is not Zeek's syntax, or names an undeclared type."""


@dataclass(frozen=True)
class Basic:
    """An atomic type: ``count``, ``addr``, ..., or ``any``."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class EnumType:
    """An enum: its full value names (``Holdout::RED``), or None for any name."""

    names: tuple[str, ...] | None = None
    name: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return "enum" if self.names is None else "enum { " + ", ".join(self.names) + " }"


@dataclass(frozen=True)
class SetType:
    """``set[T]``, or ``set[T1, T2]`` (elements are vectors of the index types)."""

    index: tuple[ScriptType, ...]

    def __str__(self) -> str:
        return "set[" + ", ".join(map(str, self.index)) + "]"


@dataclass(frozen=True)
class TableType:
    """``table[K] of V``, or a composite index ``table[K1, K2] of V``."""

    index: tuple[ScriptType, ...]
    value: ScriptType

    def __str__(self) -> str:
        return "table[" + ", ".join(map(str, self.index)) + f"] of {self.value}"


@dataclass(frozen=True)
class VectorType:
    """``vector of T``."""

    element: ScriptType

    def __str__(self) -> str:
        return f"vector of {self.element}"


@dataclass(frozen=True)
class Field:
    """A record field or an event parameter: name, type, and whether it may be null."""

    name: str
    type: ScriptType
    optional: bool = False
    default: str | None = None  # the ``&default=`` text, kept for rendering

    @property
    def nullable(self) -> bool:
        """A null is sent as ``none``: Zeek leaves the field unset (or takes its default)."""
        return self.optional or self.default is not None

    def __str__(self) -> str:
        text = f"{self.name}: {self.type}"
        if self.optional:
            text += " &optional"
        if self.default is not None:
            text += f" &default={self.default}"
        return text


@dataclass(frozen=True)
class RecordType:
    """A record: its fields in declaration order (travels as a vector, one element each)."""

    fields: tuple[Field, ...]
    name: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return "record { " + "".join(f"{f}; " for f in self.fields) + "}"


ScriptType = Basic | EnumType | SetType | TableType | VectorType | RecordType


@dataclass(frozen=True)
class EventSignature:
    """An event's full name and its parameters, in order."""

    name: str
    params: tuple[Field, ...]

    def __str__(self) -> str:
        return f"{self.name}(" + ", ".join(map(str, self.params)) + ")"


_TRANSPORT = EnumType(("unknown_transport", "tcp", "udp", "icmp"), "transport_proto")

#: Zeek's own typedefs (``scripts/base/init-bare.zeek``) that event parameters use.
BUILTIN_TYPES: dict[str, ScriptType] = {
    "string_array": TableType((Basic("count"),), Basic("string")),
    "string_set": SetType((Basic("string"),)),
    "subnet_set": SetType((Basic("subnet"),)),
    "addr_set": SetType((Basic("addr"),)),
    "count_set": SetType((Basic("count"),)),
    "interval_set": SetType((Basic("interval"),)),
    "index_vec": VectorType(Basic("count")),
    "int_vec": VectorType(Basic("int")),
    "double_vec": VectorType(Basic("double")),
    "subnet_vec": VectorType(Basic("subnet")),
    "string_vec": VectorType(Basic("string")),
    "addr_vec": VectorType(Basic("addr")),
    "any_vec": VectorType(Basic("any")),
    "table_string_of_string": TableType((Basic("string"),), Basic("string")),
    "table_string_of_count": TableType((Basic("string"),), Basic("count")),
    "transport_proto": _TRANSPORT,
    "Log::ID": EnumType(None, "Log::ID"),
}

# --- reading the text ---------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<literal>[0-9.][0-9A-Za-z_.:/]*)
  | (?P<punct>[][{}(),;:=&/+*-])
    """,
    re.VERBOSE,
)


@dataclass
class _Token:
    kind: str
    text: str
    pos: int


def _tokens(text: str) -> Iterator[_Token]:
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SignatureError(f"unexpected {text[pos]!r} at column {pos + 1}")
        kind = match.lastgroup or "punct"
        if kind != "space":
            yield _Token(kind, match.group(), pos)
        pos = match.end()


class _Parser:
    """Recursive descent over the tokens; named types resolve as they are met."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(_tokens(text))
        self.i = 0
        self.module = ""
        self.declared: dict[str, ScriptType] = {}

    # -- tokens --------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def fail(self, expected: str) -> SignatureError:
        token = self.peek()
        if token is None:
            return SignatureError(f"expected {expected} at the end of {self.text.strip()!r}")
        return SignatureError(
            f"expected {expected} at column {token.pos + 1}, found {token.text!r}"
        )

    def at(self, text: str) -> bool:
        token = self.peek()
        return token is not None and token.text == text and token.kind != "string"

    def take(self, text: str) -> None:
        if not self.at(text):
            raise self.fail(repr(text))
        self.i += 1

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def name(self, what: str = "a name") -> str:
        token = self.peek()
        if token is None or token.kind != "name":
            raise self.fail(what)
        self.i += 1
        return token.text

    # -- names -----------------------------------------------------------------------------

    def qualified(self, name: str) -> str:
        """``name`` in the current module, as Zeek scopes a declaration."""
        if "::" in name or not self.module or self.module == "GLOBAL":
            return name
        return f"{self.module}::{name}"

    def resolve(self, name: str) -> ScriptType:
        for candidate in (self.qualified(name), name):
            if candidate in self.declared:
                return self.declared[candidate]
        if name in BUILTIN_TYPES:
            return BUILTIN_TYPES[name]
        raise SignatureError(
            f"unknown type {name!r}: declare it first (type {name}: record {{ ... }}; "
            "or enum { ... };), or write it inline"
        )

    # -- types -----------------------------------------------------------------------------

    def type(self, declaring: str | None = None) -> ScriptType:
        token = self.peek()
        if token is None or token.kind != "name":
            raise self.fail("a type")
        word = token.text
        self.i += 1
        if word in BASIC_TYPES:
            return Basic(word)
        if word in ("set", "table"):
            self.take("[")
            index = [self.type()]
            while self.accept(","):
                index.append(self.type())
            self.take("]")
            if word == "set":
                return SetType(tuple(index))
            self.take("of")
            return TableType(tuple(index), self.type())
        if word == "vector":
            self.take("of")
            return VectorType(self.type())
        if word == "record":
            return RecordType(self.fields("{", "}", ";"), declaring)
        if word == "enum":
            return self.enum(declaring)
        if word in ("file", "func", "function", "opaque", "hook", "event"):
            raise SignatureError(f"type {word!r} cannot be sent to Zeek (column {token.pos + 1})")
        return self.resolve(word)

    def enum(self, declaring: str | None) -> EnumType:
        if not self.accept("{"):
            return EnumType(None, declaring)
        module = declaring.rpartition("::")[0] if declaring else ""
        names: list[str] = []
        while not self.accept("}"):
            value = self.name("an enum name")
            names.append(f"{module}::{value}" if module and "::" not in value else value)
            if not self.accept(","):
                self.take("}")
                break
        if not names:
            raise SignatureError(f"enum {declaring or ''} lists no names".replace("  ", " "))
        return EnumType(tuple(names), declaring)

    def fields(self, open_: str, close: str, sep: str) -> tuple[Field, ...]:
        """``open_ name: type attrs (sep name: type attrs)* close``; ``sep`` may end records."""
        self.take(open_)
        out: list[Field] = []
        while not self.accept(close):
            name = self.name("a field name")
            self.take(":")
            out.append(self.attributes(name, self.type()))
            if not self.accept(sep):
                self.take(close)
                break
        seen: set[str] = set()
        for f in out:
            if f.name in seen:
                raise SignatureError(f"{f.name!r} is declared twice")
            seen.add(f.name)
        return tuple(out)

    def attributes(self, name: str, type_: ScriptType) -> Field:
        optional, default = False, None
        while self.accept("&"):
            attr = self.name("an attribute")
            if attr == "optional":
                optional = True
            elif self.accept("="):
                text = self.attribute_value()
                if attr == "default":
                    default = text
        return Field(name, type_, optional, default)

    def attribute_value(self) -> str:
        """The text of an attribute's value, up to the next attribute or separator."""
        start = self.peek()
        if start is None:
            raise self.fail("a value")
        depth = 0
        while True:
            token = self.peek()
            if token is None:
                break
            if token.kind != "string":
                if token.text in "([{":
                    depth += 1
                elif token.text in ")]}":
                    if depth == 0:
                        break
                    depth -= 1
                elif depth == 0 and token.text in ("&", ";", ","):
                    break
            self.i += 1
        end = self.tokens[self.i - 1]
        return self.text[start.pos : end.pos + len(end.text)]

    # -- declarations and the event ------------------------------------------------------------

    def signature(self) -> EventSignature:
        event: EventSignature | None = None
        while self.peek() is not None:
            if self.accept(";"):
                continue
            found = self.statement()
            if found is not None:
                if event is not None:
                    raise SignatureError(
                        f"two events given ({event.name} and {found.name}): one write "
                        "publishes one event"
                    )
                event = found
        if event is None:
            raise SignatureError("no event: expected NAME(param: type, ...)")
        return event

    def statement(self) -> EventSignature | None:
        if self.accept("module"):
            self.module = self.name("a module name")
            self.take(";")
            return None
        if self.accept("export"):
            self.take("{")
            found = None
            while not self.accept("}"):
                if self.accept(";"):
                    continue
                event = self.statement()
                found = found or event
            return found
        if self.accept("type"):
            name = self.qualified(self.name("a type name"))
            self.take(":")
            self.declared[name] = self.type(declaring=name)
            return None
        if self.accept("global"):
            name = self.name("an event name")
            self.take(":")
            self.take("event")
            return self.event(name)
        self.accept("event")
        return self.event(self.name("an event name"))

    def event(self, name: str) -> EventSignature:
        params = self.fields("(", ")", ",")
        if self.at("{"):
            raise self.fail("the end of the signature (a handler body is not a signature)")
        return EventSignature(self.qualified(name), params)


def parse_signature(text: str) -> EventSignature:
    """The event declared by ``text`` (declarations of named types may come first)."""
    return _Parser(text).signature()


def parse_type(text: str, declarations: str = "") -> ScriptType:
    """One Zeek type (``set[addr]``, ``record { a: count; }``); ``declarations`` may declare
    the named types it uses (``type Rec: record {...};``)."""
    parser = _Parser(declarations)
    while parser.peek() is not None:
        if not parser.accept(";") and parser.statement() is not None:
            raise SignatureError("declarations may not declare an event here")
    parser.tokens = list(_tokens(text))
    parser.i = 0
    parser.text = text
    result = parser.type()
    if parser.peek() is not None:
        raise parser.fail("the end of the type")
    return result

"""JSON Schema → llama.cpp GBNF: a grammar whose every sentence is a JSON document valid against the schema.

Pure Python (no llama.cpp), so the frontend compiles `response_format` schemas — and names the schema
path of anything it cannot take, before any backend call — and the llama.cpp backend compiles tool
parameter schemas with the same code. The GBNF text travels in `PredictOptions.Grammar`, as the
reference sends it.

Supported: `type` (one or a list), `enum`, `const`, `anyOf` / `oneOf`, a one-element `allOf`, `$ref` into
`#/$defs` or `#/definitions` (recursion included), objects (`properties`, `required`, `additionalProperties`),
arrays (`items`, `minItems`, `maxItems`), strings (`minLength`, `maxLength`, `format` date / time /
date-time / uuid), numbers, integers, booleans, null. Annotations (`title`, `description`, `default`, …) are
ignored. A keyword that constrains values in a way the grammar cannot express (`pattern`, `minimum`,
`multipleOf`, `not`, …) is refused with its path rather than ignored: the output must validate.

Grammars are small and deterministic: properties come in schema order (required ones always, optional
ones may be left out, additional ones are never generated — fewer properties always validate), and
whitespace is at most one space so a small model cannot loop on newlines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

MAX_DEPTH = 48
MAX_GRAMMAR_CHARS = 200_000
MAX_BOUNDED_REPEAT = 1_000

_REFUSED_KEYWORDS = (
    "pattern",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "if",
    "then",
    "else",
    "not",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
)
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")

_PRIMITIVES = {
    "ws": '" "?',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws',
    "array": '"[" ws ( value ( "," ws value )* )? "]" ws',
    "char": r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": r'"\"" char* "\"" ws',
    "integer-part": '"-"? ( [0-9] | [1-9] [0-9]{1,15} )',
    "integer": "integer-part ws",
    "number": 'integer-part ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? ws',
    "boolean": '( "true" | "false" ) ws',
    "null": '"null" ws',
    "date": '[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )',
    "time": '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? '
    '( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
    "date-string": r'"\"" date "\"" ws',
    "time-string": r'"\"" time "\"" ws',
    "date-time-string": r'"\"" date "T" time "\"" ws',
    "uuid-string": r'"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" '
    r'[0-9a-fA-F]{12} "\"" ws',
}
_DEPENDS = {  # primitive -> the primitives its body names
    "value": ("object", "array", "string", "number", "boolean", "null"),
    "object": ("ws", "string", "value"),
    "array": ("ws", "value"),
    "string": ("char", "ws"),
    "integer": ("integer-part", "ws"),
    "number": ("integer-part", "ws"),
    "boolean": ("ws",),
    "null": ("ws",),
    "date-string": ("date", "ws"),
    "time-string": ("time", "ws"),
    "date-time-string": ("date", "time", "ws"),
    "uuid-string": ("ws",),
}
_FORMATS = {
    "date": "date-string",
    "time": "time-string",
    "date-time": "date-time-string",
    "uuid": "uuid-string",
}


class SchemaError(ValueError):
    """A schema the grammar compiler cannot take; `path` is where, in dotted form (`properties.a.items`)."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message

    def dotted(self, prefix: str) -> str:
        """`prefix` followed by the path: `response_format.json_schema.schema.properties.a`."""
        text = prefix
        for part in self.path:
            text += f"[{part}]" if isinstance(part, int) else f".{part}"
        return text


def literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def json_literal(value: Any) -> str:
    """A GBNF expression matching `value` as compact JSON, then optional whitespace."""
    return literal(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) + " ws"


@dataclass
class Grammar:
    """Rules being built; `add` names a rule body once (the same body gets the same name)."""

    rules: dict[str, str] = field(default_factory=lambda: {"ws": _PRIMITIVES["ws"]})  # every rule may use ws
    _by_body: dict[str, str] = field(default_factory=dict)

    def primitive(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _PRIMITIVES[name]
            for dep in _DEPENDS.get(name, ()):
                self.primitive(dep)
        return name

    def add(self, hint: str, body: str) -> str:
        if (known := self._by_body.get(body)) is not None:
            return known
        name = self.reserve(hint)
        self.define(name, body)
        return name

    def reserve(self, hint: str) -> str:
        base = "".join(c if c.isalnum() or c == "-" else "-" for c in hint).strip("-").lower() or "r"
        name, n = base, 1
        while name in self.rules or name in _PRIMITIVES or name == "root":
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = ""  # reserved: a recursive $ref may name it before its body is known
        return name

    def define(self, name: str, body: str) -> None:
        self.rules[name] = body
        self._by_body.setdefault(body, name)

    def text(self, root: str) -> str:
        lines = [f"root ::= {root}"] + [f"{name} ::= {body}" for name, body in self.rules.items()]
        text = "\n".join(lines) + "\n"
        if len(text) > MAX_GRAMMAR_CHARS:
            raise SchemaError(
                (),
                f"the schema's grammar is {len(text)} characters, more than {MAX_GRAMMAR_CHARS}; "
                "simplify the schema (fewer enum values, smaller maxItems / maxLength)",
            )
        return text


class SchemaCompiler:
    """Compiles schemas into one `Grammar` (several tools' parameters share rules); `doc` resolves `$ref`s."""

    def __init__(self, grammar: Grammar | None = None) -> None:
        self.grammar = grammar or Grammar()
        self._refs: dict[tuple[int, str], str] = {}

    def compile(self, schema: Any, hint: str = "schema") -> str:
        """The name of a rule matching `schema`; raises SchemaError."""
        if not isinstance(schema, (dict, bool)):
            raise SchemaError((), "a schema must be a JSON object (or true)")
        return self._visit(schema, (), schema, hint, 0)

    def _visit(self, schema: Any, path: tuple[str | int, ...], doc: Any, hint: str, depth: int) -> str:
        g = self.grammar
        if depth > MAX_DEPTH:
            raise SchemaError(path, f"the schema nests deeper than {MAX_DEPTH} levels")
        if schema is True or schema == {}:
            return g.primitive("value")
        if not isinstance(schema, dict):
            raise SchemaError(path, "a schema must be a JSON object or true (false accepts nothing)")
        for keyword in _REFUSED_KEYWORDS:
            if keyword in schema:
                raise SchemaError(
                    (*path, keyword),
                    f"`{keyword}` is not supported by the grammar compiler; "
                    "leave it out of the schema (or check it after the reply)",
                )

        def sub(child: Any, *where: str | int) -> str:
            return self._visit(child, (*path, *where), doc, f"{hint}-{where[-1]}", depth + 1)

        if "$ref" in schema:
            return self._ref(schema["$ref"], path, doc, depth)
        combined = self._combined(schema, path, hint, sub)
        if combined is not None:
            return combined
        kind = schema.get("type")
        if kind is None:
            kind = _implied_type(schema)
        if kind not in _TYPES:
            raise SchemaError((*path, "type"), f"unknown type {kind!r}; use one of {', '.join(_TYPES)}")
        return _BUILDERS[kind](self, schema, path, hint, sub)

    def _combined(
        self, schema: dict[str, Any], path: tuple[str | int, ...], hint: str, sub: Sub
    ) -> str | None:
        """The rule of a schema made of alternatives or fixed values (anyOf, allOf, const, enum, a type list)."""
        g = self.grammar
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = schema[key]
                if not isinstance(options, list) or not options:
                    raise SchemaError((*path, key), f"`{key}` must be a non-empty list of schemas")
                rest = {k: v for k, v in schema.items() if k != key}
                merged = [
                    {**rest, **o} if isinstance(o, dict) and _has_type_words(rest) else o for o in options
                ]
                return g.add(hint, " | ".join(sub(o, key, i) for i, o in enumerate(merged)))
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or len(parts) != 1:
                raise SchemaError(
                    (*path, "allOf"), "`allOf` is supported with exactly one schema; merge the others"
                )
            return sub(parts[0], "allOf", 0)
        if "const" in schema:
            return g.add(hint, json_literal(schema["const"]))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaError((*path, "enum"), "`enum` must be a non-empty list")
            return g.add(hint, " | ".join(json_literal(v) for v in values))
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind:
                raise SchemaError((*path, "type"), "`type` must name at least one type")
            return g.add(hint, " | ".join(sub({**schema, "type": t}, "type", i) for i, t in enumerate(kind)))
        return None

    def _ref(self, ref: Any, path: tuple[str | int, ...], doc: Any, depth: int) -> str:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise SchemaError((*path, "$ref"), "only local references (`#/$defs/<name>`) are supported")
        key = (id(doc), ref)
        if key in self._refs:
            return self._refs[key]
        target = _resolved(doc, ref)
        if target is _UNRESOLVED:
            raise SchemaError((*path, "$ref"), f"reference {ref} does not resolve in this schema")
        if (cycle := _reference_cycle(doc, ref, target)) is not None:
            raise SchemaError(
                (*path, "$ref"),
                f"references {' -> '.join(cycle)} name each other before any value: "
                "llama.cpp refuses such a grammar (left recursion); put the recursion "
                "inside an object or array",
            )
        name = self.grammar.reserve("ref-" + ref.rsplit("/", 1)[-1])
        self._refs[key] = name
        body = self._visit(target, tuple(p for p in ref[2:].split("/")), doc, name, depth + 1)
        if body == name:
            raise SchemaError(
                (*path, "$ref"), f"reference {ref} only refers to itself: it describes no value"
            )
        self.grammar.define(name, body)
        return name


_UNRESOLVED = object()


def _resolved(doc: Any, ref: str) -> Any:
    """The schema a local `$ref` (`#/$defs/a`) names in `doc`; _UNRESOLVED when it names none."""
    if not ref.startswith("#/"):
        return _UNRESOLVED
    target = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return _UNRESOLVED
        target = target[part]
    return target


def _reference_cycle(doc: Any, ref: str, target: Any) -> list[str] | None:
    """The references by which `ref` reaches itself before any JSON is written (a -> b -> a, or a -> anyOf [a, …]),
    a grammar llama.cpp refuses as left recursion; None when there are none (a cycle through an object or an
    array consumes text first and is fine). Depth-first, each reference explored once."""
    done: set[str] = set()

    def walk(schema: Any, chain: list[str]) -> list[str] | None:
        if not isinstance(schema, dict):
            return None
        nxt = schema.get("$ref")
        if isinstance(nxt, str):
            if nxt in chain:
                return [*chain, nxt]
            if nxt in done or (resolved := _resolved(doc, nxt)) is _UNRESOLVED:
                return None
            found = walk(resolved, [*chain, nxt])
            done.add(nxt)
            return found
        for key in ("anyOf", "oneOf", "allOf"):
            options = schema.get(key)
            for option in options if isinstance(options, list) else ():
                if (found := walk(option, chain)) is not None:
                    return found
        return None

    return walk(target, [ref])


def _has_type_words(schema: dict[str, Any]) -> bool:
    return any(k in schema for k in ("type", "properties", "items", "required"))


def _implied_type(schema: dict[str, Any]) -> str:
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "minItems" in schema or "maxItems" in schema:
        return "array"
    if "minLength" in schema or "maxLength" in schema or "format" in schema:
        return "string"
    raise SchemaError((), "the schema gives no `type` (nor properties, items, enum or const) to generate")


def _count(schema: dict[str, Any], key: str, path: tuple[str | int, ...], default: int | None) -> int | None:
    value = schema.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SchemaError((*path, key), f"`{key}` must be a non-negative integer")
    if value > MAX_BOUNDED_REPEAT:
        raise SchemaError(
            (*path, key), f"`{key}` above {MAX_BOUNDED_REPEAT} is not supported by the grammar compiler"
        )
    return value


def _repeat(item: str, low: int, high: int | None, separator: str = "") -> str:
    """`item` low..high times (high None: unbounded), joined by `separator`."""
    if high is not None and high < low:
        raise ValueError("max below min")
    if high == 0:
        return ""
    sep = f"{separator} " if separator else ""
    if low == 0:
        rest = "" if high == 1 else f" ( {sep}{item} ){_bound(0, None if high is None else high - 1)}"
        return f"( {item}{rest} )?"
    rest = "" if high == 1 else f" ( {sep}{item} ){_bound(low - 1, None if high is None else high - 1)}"
    return f"{item}{rest}"


def _bound(low: int, high: int | None) -> str:
    if high is None:
        return "*" if low == 0 else f"{{{low},}}"
    return f"{{{low},{high}}}"


Sub = Callable[..., str]


def _object(
    c: SchemaCompiler, schema: dict[str, Any], path: tuple[str | int, ...], hint: str, sub: Sub
) -> str:
    g = c.grammar
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise SchemaError((*path, "properties"), "`properties` must be an object of schemas")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError((*path, "required"), "`required` must be a list of property names")
    if missing := [r for r in required if r not in properties]:
        if schema.get("additionalProperties") is False or properties:
            raise SchemaError(
                (*path, "required"), f"required properties {missing} have no schema in `properties`"
            )
    extra = schema.get("additionalProperties")
    if "additionalProperties" in schema and not isinstance(extra, (bool, dict)):
        raise SchemaError(
            (*path, "additionalProperties"), "`additionalProperties` must be true, false or a schema"
        )
    if not properties:
        if extra is False or (
            not required and "additionalProperties" not in schema and "properties" in schema
        ):
            return g.add(hint, '"{" ws "}" ws')
        if isinstance(extra, dict) and extra:
            value = sub(extra, "additionalProperties")
            g.primitive("string")
            return g.add(
                hint, f'"{{" ws ( string ":" ws {value} ( "," ws string ":" ws {value} )* )? "}}" ws'
            )
        return g.primitive("object")
    pairs = []
    for name, prop in properties.items():
        value = sub(prop, "properties", name)
        pairs.append(
            (name, g.add(f"{hint}-{name}-kv", f'{json_literal(name)} ":" ws {value}'), name in required)
        )
    return g.add(hint, f'"{{" ws {_members(g, hint, pairs)} "}}" ws')


def _members(g: Grammar, hint: str, pairs: list[tuple[str, str, bool]]) -> str:
    """Members in order: required ones always, each optional one present or not, commas between."""
    # The first member written is any optional one up to and including the first required one.
    leading = next((i + 1 for i, pair in enumerate(pairs) if pair[2]), len(pairs))
    # rest[i]: members i.. after one was written (each present one starts with a comma); named when shared.
    rest = [""] * (len(pairs) + 1)
    for i in range(len(pairs) - 1, 0, -1):
        _name, kv, needed = pairs[i]
        item = f'"," ws {kv}' if needed else f'( "," ws {kv} )?'
        rest[i] = f"{item} {rest[i + 1]}".strip()
        if i < leading and leading > 1:
            rest[i] = g.add(f"{hint}-rest", rest[i])
    alternatives = [f"{kv} {rest[i + 1]}".strip() for i, (_name, kv, _needed) in enumerate(pairs[:leading])]
    choice = alternatives[0] if len(alternatives) == 1 else f"( {' | '.join(alternatives)} )"
    return choice if pairs[leading - 1][2] else f"{choice}?"


def _array(
    c: SchemaCompiler, schema: dict[str, Any], path: tuple[str | int, ...], hint: str, sub: Sub
) -> str:
    items = schema.get("items", True)
    item = sub(items, "items") if items is not True and items != {} else c.grammar.primitive("value")
    low = _count(schema, "minItems", path, 0) or 0
    high = _count(schema, "maxItems", path, None)
    if high is not None and high < low:
        raise SchemaError((*path, "maxItems"), "`maxItems` is below `minItems`: no array validates")
    return c.grammar.add(hint, f'"[" ws {_repeat(item, low, high, chr(34) + "," + chr(34) + " ws")} "]" ws')


def _string(
    c: SchemaCompiler, schema: dict[str, Any], path: tuple[str | int, ...], hint: str, sub: Sub
) -> str:
    g = c.grammar
    fmt = schema.get("format")
    if fmt is not None:
        if fmt not in _FORMATS:
            raise SchemaError(
                (*path, "format"),
                f"string format {fmt!r} is not supported by the grammar compiler; "
                f"use one of {', '.join(_FORMATS)} or leave `format` out",
            )
        return g.primitive(_FORMATS[fmt])
    low = _count(schema, "minLength", path, 0) or 0
    high = _count(schema, "maxLength", path, None)
    if low == 0 and high is None:
        return g.primitive("string")
    if high is not None and high < low:
        raise SchemaError((*path, "maxLength"), "`maxLength` is below `minLength`: no string validates")
    g.primitive("string")
    return g.add(hint, f'"\\"" char{_bound(low, high)} "\\"" ws')


_BUILDERS: dict[str, Callable[[SchemaCompiler, dict[str, Any], tuple[str | int, ...], str, Sub], str]] = {
    "object": _object,
    "array": _array,
    "string": _string,
    "number": lambda c, s, p, h, sub: c.grammar.primitive("number"),
    "integer": lambda c, s, p, h, sub: c.grammar.primitive("integer"),
    "boolean": lambda c, s, p, h, sub: c.grammar.primitive("boolean"),
    "null": lambda c, s, p, h, sub: c.grammar.primitive("null"),
}

JSON_OBJECT_GRAMMAR = (
    'root ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws\n'
    + "".join(
        f"{name} ::= {_PRIMITIVES[name]}\n"
        for name in (
            "ws",
            "value",
            "object",
            "array",
            "char",
            "string",
            "integer-part",
            "number",
            "boolean",
            "null",
        )
    )
)


@lru_cache(maxsize=256)
def schema_grammar(schema_json: str) -> str:
    """GBNF for one schema, given as JSON text (the cache key: a client repeats its schema); SchemaError."""
    compiler = SchemaCompiler()
    root = compiler.compile(json.loads(schema_json))
    return compiler.grammar.text(root)

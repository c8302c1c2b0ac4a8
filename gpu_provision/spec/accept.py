"""A JSON Schema compiled once into plain Python checks that answer one question: is this document surely valid?

Validating with jsonschema walks the schema again for every value (a validator object, a keyword lookup and a
type check per value); on a 10,000-node cluster file that costs about half of what libyaml takes to parse it, and
importing jsonschema costs a command that only reads one node's settings more than the rest of its work. Here each
subschema becomes a closure once per schema and process, so checking a valid file is a few function calls per value.

The answer is one-sided on purpose: :func:`compile_schema` returns a check that accepts only documents jsonschema
accepts too, and may refuse some it would accept (a number compared as finite, ``1.0`` against ``enum: [1]``, a
keyword it does not know). A refusal therefore proves nothing: the caller runs jsonschema, whose errors and wording
are the ones reported (:func:`gpu_provision.spec.schema.validate`, :func:`gpu_provision.verify.report.schema_problems`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cache
from typing import Any

Check = Callable[[Any], bool]

#: Keywords that only annotate or document; they never refuse a value.
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples", "x-allowed",
                          "x-problem",                           "$defs", "definitions", "deprecated", "readOnly", "writeOnly"})
#: RFC 3339 date-time, as strict as any format checker jsonschema may use.
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z")


_SCALARS = (str, int, float, bool, type(None))


def _never(instance: Any) -> bool:
    return False


def _always(instance: Any) -> bool:
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


_TYPES: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    # Finite only: stricter than Draft 2020-12 (which lets NaN through) and as strict as the cluster file's validator.
    "number": _finite,
    "integer": lambda v: _finite(v) and (isinstance(v, int) or float(v).is_integer()),
}


class _Compiler:
    """Compiles one root schema; ``$ref`` to ``#/...`` is looked up in it once and shared."""

    def __init__(self, root: dict[str, Any]):
        self.root = root
        self.refs: dict[str, Check] = {}

    def ref(self, pointer: str) -> Check:
        if pointer not in self.refs:
            if not pointer.startswith("#/"):
                return _never
            target: Any = self.root
            for part in pointer[2:].split("/"):
                target = target.get(part) if isinstance(target, dict) else None
            self.refs[pointer] = _never  # a reference to itself, met while compiling, refuses (jsonschema decides)
            compiled, _ = self.compile(target)
            self.refs[pointer] = compiled
        resolved = self.refs
        return lambda v: resolved[pointer](v)

    def compile(self, schema: Any) -> tuple[Check, bool]:
        """The check for ``schema`` and whether it is exact (accepts exactly what jsonschema accepts), which an
        ``if`` needs: a condition judged too strictly would skip its ``then``."""
        if schema is True or schema == {}:
            return _always, True
        if not isinstance(schema, dict):
            return _never, False
        checks: list[Check] = []
        exact = True
        for keyword, value in schema.items():
            if keyword in _ANNOTATIONS:
                continue
            made = self.keyword(keyword, value, schema)
            if made is None:
                return _never, False
            check, keyword_exact = made
            checks.append(check)
            exact = exact and keyword_exact
        if not checks:
            return _always, exact
        if len(checks) == 1:
            return checks[0], exact
        return _every(checks), exact

    def keyword(self, keyword: str, value: Any, schema: dict[str, Any]) -> tuple[Check, bool] | None:
        """One keyword's check, or None for a keyword (or form of one) this compiler does not know."""
        if keyword == "type":
            names = value if isinstance(value, list) else [value]
            if not all(n in _TYPES for n in names):
                return None
            tests = tuple(_TYPES[n] for n in names)
            exact = not {"number", "integer"} & set(names)
            if len(tests) == 1:
                return tests[0], exact
            return (lambda v: any(t(v) for t in tests)), exact
        if keyword in ("enum", "const"):
            allowed = value if keyword == "enum" else [value]
            if not isinstance(allowed, list) or not all(isinstance(a, str) or a is None or _is_number(a)
                                                        or isinstance(a, bool) for a in allowed):
                return None
            pairs = {(type(a), a) for a in allowed}
            return (lambda v: isinstance(v, _SCALARS) and (type(v), v) in pairs), all(isinstance(a, str) for a in allowed)
        if keyword == "pattern":
            regex = re.compile(value)
            whole = value.startswith("^") and value.endswith("$")
            match = regex.fullmatch if whole else regex.search
            return (lambda v: not isinstance(v, str) or match(v) is not None), False
        if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not _is_number(value):
                return None
            bound = value
            compare: Callable[[Any], bool] = {
                "minimum": lambda v: v >= bound, "maximum": lambda v: v <= bound,
                "exclusiveMinimum": lambda v: v > bound, "exclusiveMaximum": lambda v: v < bound}[keyword]
            return (lambda v: not _is_number(v) or (math.isfinite(v) and compare(v))), False
        if keyword in ("minLength", "maxLength", "minItems", "maxItems"):
            kind = str if keyword.endswith("Length") else list
            size = value
            if keyword.startswith("min"):
                return (lambda v: not isinstance(v, kind) or len(v) >= size), True
            return (lambda v: not isinstance(v, kind) or len(v) <= size), True
        if keyword == "format":
            if value != "date-time":
                return None
            return (lambda v: not isinstance(v, str) or _DATE_TIME.match(v) is not None), False
        if keyword == "required":
            keys = frozenset(value)
            return (lambda v: not isinstance(v, dict) or keys <= v.keys()), True
        if keyword == "properties":
            return self.properties(value)
        if keyword == "additionalProperties":
            if "patternProperties" in schema:
                return None
            known = frozenset(schema.get("properties", {}))
            if value is False:
                return (lambda v: not isinstance(v, dict) or known.issuperset(v)), True
            extra, extra_exact = self.compile(value)
            return (lambda v: not isinstance(v, dict) or all(extra(x) for k, x in v.items() if k not in known)), \
                extra_exact
        if keyword == "propertyNames":
            key_check, names_exact = self.compile(value)
            return (lambda v: not isinstance(v, dict) or all(key_check(k) for k in v)), names_exact
        if keyword == "items":
            if isinstance(value, list) or "prefixItems" in schema:
                return None
            item, item_exact = self.compile(value)

            def items(v: Any) -> bool:
                if isinstance(v, list):
                    for x in v:
                        if not item(x):
                            return False
                return True

            return items, item_exact
        if keyword == "$ref":
            return self.ref(value), False
        if keyword == "allOf":
            parts = [self.compile(s) for s in value]
            return _every([p[0] for p in parts]), all(p[1] for p in parts)
        if keyword == "if":
            return self.conditional(value, schema)
        if keyword in ("then", "else"):
            return (_always, True) if "if" in schema else None
        return None

    def properties(self, value: dict[str, Any]) -> tuple[Check, bool]:
        compiled = {key: self.compile(sub) for key, sub in value.items()}
        table = {key: check for key, (check, _) in compiled.items()}

        def check(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for key, item in v.items():
                sub = table.get(key)
                if sub is not None and not sub(item):
                    return False
            return True

        return check, all(exact for _, exact in compiled.values())

    def conditional(self, condition: Any, schema: dict[str, Any]) -> tuple[Check, bool] | None:
        test, test_exact = self.compile(condition)
        if not test_exact:
            return None
        then, then_exact = self.compile(schema.get("then", True))
        other, other_exact = self.compile(schema.get("else", True))
        return (lambda v: then(v) if test(v) else other(v)), then_exact and other_exact


def _every(checks: list[Check]) -> Check:
    """A check passing where each of ``checks`` passes, tried in order (a loop: no generator per value)."""
    every = tuple(checks)

    def check(v: Any) -> bool:
        for c in every:  # noqa: SIM110 (all() over a generator costs a generator per value checked)
            if not c(v):
                return False
        return True

    return check


def compile_schema(schema: dict[str, Any]) -> Check:
    """A check that accepts only documents valid under ``schema`` (Draft 2020-12, patterns anchored by ``^...$``
    matching the whole value); it may refuse valid ones, which the caller then validates with jsonschema."""
    return _Compiler(schema).compile(schema)[0]


@cache
def acceptor(name: str) -> Check:
    """The compiled check of the package's schema called ``name``, compiled once per process."""
    from gpu_provision.spec.schema import load_schema

    return compile_schema(load_schema(name))

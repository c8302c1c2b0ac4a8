"""JSON Schema validation of a parsed cluster file, with messages a person can act on.

Every error names the YAML path exactly as the user writes it and says what is allowed; they are sorted most
specific (deepest path) first.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from gpu_provision.errors import SpecProblem
from gpu_provision.spec.yamlsafe import Positions, format_path


@cache
def load_schema(name: str = "cluster.v1.schema.json") -> dict[str, Any]:
    """The JSON Schema called ``name``, read from the installed package (``gpu_provision/schemas/``).

    Read through :mod:`importlib.resources` so a wheel, an sdist install and the checkout all find the same file.
    """
    return json.loads((resources.files("gpu_provision") / "schemas" / name).read_text(encoding="utf-8"))


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: jsonschema.ValidationError) -> tuple[tuple[str | int, ...], str, bool]:
    """(path, message, located at the key rather than the value) for one schema error."""
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    hint = f" (allowed: {schema['x-allowed']})" if schema.get("x-allowed") else ""
    v = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    if "propertyNames" in error.schema_path:
        return (*path, instance), f"{_short(instance)} is not allowed as a key here{hint}", True
    if v == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = [k for k in instance if k not in schema.get("properties", {})]
        key = extra[0] if extra else "?"
        return (*path, key), f"unknown key '{key}' (allowed: {', '.join(allowed)})", True
    if v == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return path, f"missing required key '{missing}'", False
    if v == "enum":
        return path, f"{_short(error.instance)} is not allowed (allowed: {', '.join(map(str, value))})", False
    if v == "const":
        return path, f"{_short(error.instance)} is not allowed (allowed: {value})", False
    if v == "type":
        expected = value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return path, f"expected {expected}, got {type(error.instance).__name__} {_short(error.instance)}{hint}", False
    if v == "pattern":
        return path, f"{_short(error.instance)} is not in the expected form{hint or f' (pattern: {value})'}", False
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        word = "at least" if "inimum" in v else "at most"
        return path, f"{_short(error.instance)} is out of range (allowed: {word} {value})", False
    if v in ("minItems", "minLength"):
        return path, f"must not be empty (allowed: {v} {value})", False
    if v in ("maxItems", "maxLength"):
        return path, f"is too long (allowed: {v} {value})", False
    return path, error.message, False


def validate(document: Any, positions: Positions, filename: str) -> list[SpecProblem]:
    """Every schema problem of ``document``, deepest first, each located in ``filename``."""
    validator = jsonschema.Draft202012Validator(load_schema())
    problems: list[tuple[int, SpecProblem]] = []
    seen: set[tuple[str, str]] = set()
    for error in validator.iter_errors(document):
        path, message, at_key = _message(error)
        line, col = positions.of(path, key=True) if at_key else positions.of(path)
        key = (format_path(path), message)
        if key in seen:
            continue
        seen.add(key)
        problems.append((len(path), SpecProblem(filename, line, col, format_path(path), message)))
    problems.sort(key=lambda item: (-item[0], item[1].line, item[1].column))
    return [p for _, p in problems]

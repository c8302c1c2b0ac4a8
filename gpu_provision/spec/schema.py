"""JSON Schema validation of a parsed cluster file, with messages a person can act on.

Every error names the YAML path exactly as the user writes it, quotes the value as the file writes it and says what
is allowed; errors come in file order. An unknown key names the closest allowed one, and a scalar YAML 1.1 reads as
something other than the text written (``no``, ``012``, ``12.10``) says to quote it.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from gpu_provision.errors import SpecProblem
from gpu_provision.spec.accept import acceptor
from gpu_provision.spec.yamlsafe import Path, Positions, format_path

if TYPE_CHECKING:
    import jsonschema

SCHEMA_FILE = "cluster.v1.schema.json"


@cache
def load_schema(name: str = SCHEMA_FILE) -> dict[str, Any]:
    """The JSON Schema called ``name``, read from the installed package (``gpu_provision/schemas/``).

    Read through :mod:`importlib.resources` so a wheel, an sdist install and the checkout all find the same file.
    """
    return json.loads((resources.files("gpu_provision") / "schemas" / name).read_text(encoding="utf-8"))


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    """JSON Schema ``pattern``, but an anchored ``^...$`` pattern must match the whole value.

    JSON Schema's ``pattern`` is a search, and Python's ``$`` also matches before a trailing newline: ``'580\\n'``
    would pass ``^[0-9]{3}$`` and add a line to a configuration file on a node.
    """
    if not validator.is_type(instance, "string"):
        return
    whole = pattern.startswith("^") and pattern.endswith("$")
    if not (re.fullmatch(pattern, instance) if whole else re.search(pattern, instance)):
        from jsonschema import ValidationError

        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _finite(checker: Any, instance: Any) -> bool:
    # JSON has no NaN or infinity, so JSON Schema's bounds let YAML's .nan through (every comparison is false).
    return isinstance(instance, (int, float)) and not isinstance(instance, bool) and math.isfinite(instance)


def _integer(checker: Any, instance: Any) -> bool:
    return _finite(checker, instance) and (isinstance(instance, int) or float(instance).is_integer())


@cache
def validator_class() -> Any:
    """Draft 2020-12 with whole-value patterns and numbers that must be finite.

    Built on first use: jsonschema is imported only for a file the compiled check (:mod:`.accept`) did not accept,
    whose problems it then finds and words.
    """
    import jsonschema
    from jsonschema import validators

    return validators.extend(
        jsonschema.Draft202012Validator,
        validators={"pattern": _pattern},
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({"number": _finite, "integer": _integer}),
    )


#: What kind of value a message says it got, in a YAML reader's words rather than Python's type names.
_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "true/false"), (int, "a number"), (float, "a number"), (dict, "a mapping"), (list, "a list"),
    (type(None), "null"), (str, "text"),
)


def _kind(value: Any) -> str:
    return next((word for cls, word in _KINDS if isinstance(value, cls)), "a date")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _shown(value: Any, path: Path, positions: Positions) -> str:
    """``value`` as the file writes it: ``012``, ``"580"``, ``'latest'``; a mapping or list by its kind."""
    written = positions.written(path)
    if written is None:
        return _kind(value) if isinstance(value, (dict, list)) else _clip(repr(value) if isinstance(value, str)
                                                                         else json.dumps(value, default=str))
    if positions.plain(path) and isinstance(value, str):
        return f"'{_clip(written)}'"
    return _clip(written) or "nothing"


def _reading(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if value is None:
        return "null (no value)"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return f"the date {value}"


def trap(written: str, reading: str) -> str:
    """The message for a scalar YAML 1.1 read as something other than the text written (``no``: the boolean false)."""
    return f"{written} is read by YAML as {reading}, not as text (quote it: '{written}')"


def _unknown_keys(path: Path, schema: dict[str, Any], instance: dict[str, Any]) -> list[tuple[Path, str, bool]]:
    """One problem per unknown key, naming the closest allowed key when one is close, else every allowed key."""
    allowed = sorted(schema.get("properties", {}))
    out = []
    for key in (k for k in instance if k not in schema.get("properties", {})):
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.75)
        hint = f"did you mean '{close[0]}'?" if close else f"allowed: {', '.join(allowed)}"
        out.append(((*path, key), f"unknown key '{key}' ({hint})", True))
    return out


def _problems(error: jsonschema.ValidationError, positions: Positions) -> list[tuple[Path, str, bool]]:
    """(path, message, located at the key rather than the value) for each problem one schema error stands for."""
    path: Path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    hint = f" (allowed: {schema['x-allowed']})" if schema.get("x-allowed") else ""
    v = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    shown = _shown(instance, path, positions)
    written = positions.written(path)
    declared = schema.get("type")
    types: list[Any] = declared if isinstance(declared, list) else [declared]
    if "string" in types and written and positions.plain(path) and not isinstance(instance, (str, dict, list)) \
            and (v == "type" or written != json.dumps(instance, default=str)):
        # Text the file meant, read by YAML 1.1 as a number, boolean, null or date: 012 -> 10, no -> false.
        return [(path, trap(written, _reading(instance)), False)]
    if "propertyNames" in error.schema_path:
        return [((*path, instance), f"'{instance}' is not allowed as a key here{hint}", True)]
    if v == "additionalProperties":
        return _unknown_keys(path, schema, instance)
    if v == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [(path, f"missing required key '{missing}'", False)]
    if v == "enum":
        allowed = ", ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
        return [(path, f"{shown} is not allowed (allowed: {allowed})", False)]
    if v == "const":
        return [(path, f"{shown} is not allowed (allowed: {value})", False)]
    if v == "type" and isinstance(instance, float) and not math.isfinite(instance):
        return [(path, f"{shown} is not a finite number{hint}", False)]
    if v == "type":
        got = "no value" if not written and instance is None else _kind(instance)
        if written and not isinstance(instance, (dict, list)):
            got += f" {shown}"
        return [(path, f"expected {' or '.join(value) if isinstance(value, list) else value}, got {got}{hint}", False)]
    if v == "pattern" and schema.get("x-problem"):  # a setting with its own words for a value out of its form
        return [(path, f"{shown} {schema['x-problem']}{hint}", False)]
    if v == "pattern":
        return [(path, f"{shown} is not in the expected form{hint or f' (pattern: {value})'}", False)]
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        word = "at least" if "inimum" in v else "at most"
        return [(path, f"{shown} is out of range (allowed: {word} {value})", False)]
    if v in ("minItems", "minLength"):
        unit = "item" if v == "minItems" else "character"
        return [(path, f"must not be empty (allowed: at least {value} {unit}{'s' * (value != 1)})", False)]
    if v in ("maxItems", "maxLength"):
        unit = "item" if v == "maxItems" else "character"
        return [(path, f"is too long (allowed: at most {value} {unit}{'s' * (value != 1)})", False)]
    return [(path, error.message, False)]


def validate(document: Any, positions: Positions, filename: str) -> list[SpecProblem]:
    """Every schema problem of ``document`` in file order (line, then column), each located in ``filename``.

    File order lets a reader fix a file top to bottom; problems at one place keep the order the schema gives them.
    A document the compiled check accepts has none, and jsonschema is not run.
    """
    if acceptor(SCHEMA_FILE)(document):
        return []
    validator = validator_class()(load_schema(SCHEMA_FILE))
    problems: list[SpecProblem] = []
    seen: set[tuple[str, str]] = set()
    for error in validator.iter_errors(document):
        for path, message, at_key in _problems(error, positions):
            line, col = positions.of(path, key=True) if at_key else positions.of(path)
            key = (format_path(path), message)
            if key in seen:
                continue
            seen.add(key)
            problems.append(SpecProblem(filename, line, col, format_path(path), message))
    return in_file_order(problems, filename)


def in_file_order(problems: list[SpecProblem], filename: str) -> list[SpecProblem]:
    """``problems`` by line and column, those in ``filename`` before those in files it names (a mig-parted file).

    Ties keep their order, so one file gives the same output on every run.
    """
    return sorted(problems, key=lambda p: (p.file != filename, p.file, p.line, p.column))

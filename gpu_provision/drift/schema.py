"""JSON Schema of ``gpu-provision drift --json`` output (version ``gpu-provision.drift/v1``)."""

from __future__ import annotations

from typing import Any

_STATUS = {"enum": ["in-sync", "drift", "not-checked", "error"]}

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gpu-provision drift report",
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "stages", "summary", "exit_status", "seconds", "parallel", "connect_timeout", "nodes"],
    "properties": {
        "version": {"const": "gpu-provision.drift/v1"},
        "stages": {"type": "array", "items": {"type": "string"}},
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "required": ["nodes", "in-sync", "drift", "not-checked", "error", "differences"],
            "properties": {k: {"type": "integer", "minimum": 0}
                           for k in ("nodes", "in-sync", "drift", "not-checked", "error", "differences")},
        },
        "exit_status": {"enum": [0, 1, 2]},
        "seconds": {"type": "number", "minimum": 0},
        "parallel": {"type": "integer", "minimum": 0},
        "connect_timeout": {"type": "number", "minimum": 0},
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "address", "status", "differences", "problems", "commands", "seconds"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "address": {"type": "string"},
                    "status": _STATUS,
                    "differences": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["stage", "kind", "item", "expected", "actual"],
                            "properties": {
                                "stage": {"type": "string"},
                                "kind": {"type": "string", "minLength": 1},
                                "item": {"type": "string"},
                                "expected": {},
                                "actual": {},
                                "file": {"type": "string", "description": "the file the finding was read from, "
                                         "where the item is not that file itself"},
                                "diff": {"type": "string", "description": "unified diff of the file's content, "
                                         "node to cluster file, secrets hidden"},
                            },
                        },
                    },
                    "problems": {"type": "array", "items": {"type": "string"}},
                    "commands": {"type": "integer", "minimum": 0},
                    "seconds": {"type": "number", "minimum": 0},
                },
            },
        },
    },
}

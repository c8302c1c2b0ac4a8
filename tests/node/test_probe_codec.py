"""The probe's JSON without :mod:`json` (``probe/_codec.py``): the same text as ``json.dumps(value,
sort_keys=True)`` and the same values as ``json.loads``, through the interpreter's ``_json`` accelerator. (That a
kept probe then imports neither json, re nor subprocess: tests/node/test_probe_module_cache.py.)"""

from __future__ import annotations

import json
import math
import random

import pytest

from gpu_provision.node.probe import _codec


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-10**20, 10**20)
    if kind == 3:
        return rng.choice([0.0, -0.0, 1e-300, 2.5, -1e300, rng.uniform(-1e6, 1e6), math.inf, -math.inf])
    if kind in (4, 5):
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 32), rng.randrange(128, 0xD7FF),
                                       0x2028, 0x1F600])) for _ in range(rng.randrange(12)))
    if kind in (6, 7):
        return {str(rng.randrange(1000)): _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def test_dumps_is_json_dumps_with_sorted_keys_and_loads_reads_it_back() -> None:
    rng = random.Random(20261201)
    for _ in range(3000):
        value = _random_value(rng)
        text = _codec.dumps(value)
        assert text == json.dumps(value, sort_keys=True)
        assert repr(_codec.loads(text)) == repr(json.loads(text))
    assert _codec.dumps({"b": (1, 2), "a": "é"}) == '{"a": "\\u00e9", "b": [1, 2]}'


def test_loads_takes_surrounding_whitespace_and_refuses_anything_else() -> None:
    assert _codec.loads(' \n{"a": [1, 2.5e3, null, NaN]}\t\r\n')["a"][:3] == [1, 2500.0, None]
    for bad in ("", "  ", "{} x", '{"a":}', "[1,]", "{'a': 1}"):
        with pytest.raises(ValueError):
            _codec.loads(bad)
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        _codec.dumps({"a": object()})

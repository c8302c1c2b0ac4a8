"""The probe's request and answer as JSON, without importing :mod:`json`.

``import json`` brings ``re`` and ``enum`` with it and compiles json's regular expressions: on Debian 12's Python
3.11 that is about 8 ms of CPU, as much as the rest of a drift check's probe, paid on every node at every check.
The work itself is done by the interpreter's accelerator module ``_json`` (CPython's, since 2.7), which
:func:`json.dumps` and :func:`json.loads` call for exactly this: the functions here call it the same way, so the
text is the same as ``json.dumps(obj, sort_keys=True)`` and the values the same as ``json.loads`` (tests compare
both). An interpreter without it, or with another signature, gets :mod:`json` itself.
"""

#: JSON's whitespace (RFC 8259), which may surround the value.
WHITESPACE = " \t\n\r"
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _not_serializable(value):
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


class _Decoding:
    """The attributes ``_json.make_scanner`` reads, with :class:`json.JSONDecoder`'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def dumps(value):
    """``json.dumps(value, sort_keys=True)``."""
    try:
        from _json import encode_basestring_ascii, make_encoder

        encode = make_encoder({}, _not_serializable, encode_basestring_ascii, None, ": ", ", ", True, False, True)
    except (ImportError, TypeError):
        import json

        return json.dumps(value, sort_keys=True)
    return "".join(encode(value, 0))


def loads(text):
    """``json.loads(text)`` for a ``str``; ValueError for text that is not one JSON value."""
    try:
        from _json import make_scanner

        scan = make_scanner(_Decoding)
    except (ImportError, TypeError):
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(WHITESPACE))
    try:
        value, end = scan(text, start)
    except StopIteration:
        raise ValueError("no JSON value at character %d" % start) from None
    if text[end:].strip(WHITESPACE):
        raise ValueError("extra data after the JSON value at character %d" % end)
    return value

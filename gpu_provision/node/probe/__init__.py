"""Probe sections: node-side modules, each with ``collect(request) -> dict`` (Python 3.9+, stdlib only).

The ``probe`` entry point reads the request (section name -> that section's arguments) from its first argument
and prints one JSON object with the answer of every requested section. A section that fails answers
``{"error": "<Type>: <message>"}`` instead, so one broken reading never hides the others.

The request's ``budget`` (seconds) bounds the whole run: every command a section runs goes through
:mod:`._command`, and the commands that ran past their bound are listed under ``timed_out`` in the answer.
"""

import sys

from . import _codec, _command

#: Every section, by module name; requested names that are not sections are ignored.
SECTIONS = ("accounts", "files", "gpu", "kubernetes", "mig", "packages", "runtime", "services", "signing", "system")


def collect(request):
    """The answer of every section named in ``request``, a failing section's answer being its error, within
    ``request["budget"]`` seconds; ``timed_out`` lists the commands that did not finish in time (absent if none)."""
    _command.start(request.get("budget"))
    out = {}
    for name in SECTIONS:
        if name not in request:
            continue
        try:
            # __import__ rather than importlib.import_module: importing importlib (and warnings with it) cost every
            # probe run more than most sections take.
            module = __name__ + "." + name
            __import__(module)
            out[name] = sys.modules[module].collect(request[name])
        except Exception as exc:
            out[name] = {"error": type(exc).__name__ + ": " + str(exc)}
    if _command.timed_out():
        out["timed_out"] = _command.timed_out()
    return out


def main(argv=None):
    """``probe [REQUEST_JSON]``: print the answer to the request (an empty request without an argument)."""
    argv = sys.argv[1:] if argv is None else argv
    request = _codec.loads(argv[0]) if argv else {}
    print(_codec.dumps(collect(request)))
    return 0

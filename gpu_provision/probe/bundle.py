"""Packing the probe sections into one self-contained ``python3 -c`` command."""

from __future__ import annotations

import base64
import json
import shlex
import zlib
from functools import cache
from importlib import resources

BOOTSTRAP = """\
import json, sys
SECTIONS = {sections}
request = json.loads(sys.argv[1])
out = {{}}
for name, source in SECTIONS.items():
    if name not in request:
        continue
    namespace = {{"__name__": "probe_" + name}}
    try:
        exec(compile(source, "probe/" + name + ".py", "exec"), namespace)
        out[name] = namespace["collect"](request[name])
    except Exception as exc:
        out[name] = {{"error": type(exc).__name__ + ": " + str(exc)}}
print(json.dumps(out, sort_keys=True))
"""


@cache
def section_sources() -> dict[str, str]:
    """Source of every probe section, by name."""
    folder = resources.files("gpu_provision.node.probe")
    return {
        entry.name[:-3]: entry.read_text()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".py") and not entry.name.startswith("_")
    }


@cache
def _packed() -> str:
    script = BOOTSTRAP.format(sections=repr(section_sources()))
    return base64.b64encode(zlib.compress(script.encode(), 9)).decode()


def command(request: dict) -> str:
    """The shell command that runs the probe for ``request`` (section name -> that section's arguments)."""
    loader = f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{_packed()}')))"
    return f"python3 -c {shlex.quote(loader)} {shlex.quote(json.dumps(request, sort_keys=True))}"

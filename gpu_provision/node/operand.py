"""Values from the cluster file that a node command takes as an operand (an image reference), checked there.

The controller validates every such value against its grammar; the node checks again where the argv is built,
because a value that starts with '-' (``--volume=/:/host``) would be read by ``docker run``, ``ctr`` or ``crictl``
as an option. Not every one of those programs ends its options at ``--`` (``ctr run`` takes the image, then the
container id, then the command), so the value is refused instead of escaped.
"""

from __future__ import annotations

import re

#: Characters an image reference can hold (distribution/reference's grammar); never a leading '-'.
_OPERAND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*\Z")


def operand(value: str) -> str:
    """``value`` when it cannot read as an option or hold whitespace, control or shell characters, else ValueError.

    >>> operand("python:3.12-slim")
    'python:3.12-slim'
    """
    if not isinstance(value, str) or not _OPERAND.match(value):
        raise ValueError("refused command operand %r: it must start with a letter or digit and hold only letters, "
                         "digits and . _ : / @ + -" % (value,))
    return value

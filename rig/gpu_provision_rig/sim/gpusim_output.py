"""A command's output as the GPU simulator collects it, and the words every listing shares (stand-in, not NVIDIA
software)."""

from __future__ import annotations


class Out:
    """Collects stdout and stderr text, so a command's output is written once at the end."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []

    def line(self, text: str = "") -> None:
        self.stdout.append(text + "\n")

    def err(self, text: str) -> None:
        self.stderr.append(text + "\n")


def enabled_word(flag: bool) -> str:
    """``Enabled``/``Disabled``, as ``--query-gpu`` and ``-q`` print a mode."""
    return "Enabled" if flag else "Disabled"

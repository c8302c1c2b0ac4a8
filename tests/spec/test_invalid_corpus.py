"""Every file in invalid/ is rejected with exit status 2, its expected message, path and line, and no traceback.

Each file's first line is ``# expect: LINE PATH MESSAGE`` where LINE counts from the line after that header. A file
with several problems reports them in file order (line, then column).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_provision.cli import main

CORPUS = sorted((Path(__file__).parent / "invalid").glob("*.yaml"))


def _expectation(path: Path) -> tuple[int, str, str]:
    header = path.read_text().splitlines()[0]
    assert header.startswith("# expect: "), path
    line, yaml_path, message = header[len("# expect: "):].split(" ", 2)
    return int(line) + 1, yaml_path, message


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_invalid_file_is_rejected_with_its_message(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line, yaml_path, message = _expectation(path)
    status = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert status == 2
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    wanted = f"{path}:{line}:"
    matching = [entry for entry in lines if entry.startswith(wanted) and f" {yaml_path}: " in entry and message in entry]
    assert matching, f"expected '{wanted}*: {yaml_path}: ...{message}...' in:\n{err}"
    for entry in lines:
        assert entry.startswith(f"{path}:"), f"every problem names the file and line: {entry}"
    places = [tuple(int(n) for n in entry[len(f"{path}:"):].split(":", 2)[:2]) for entry in lines]
    assert places == sorted(places), f"problems are reported in file order:\n{err}"

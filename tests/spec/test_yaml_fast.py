"""libyaml's composer (the fast path of large files) gives the same values, positions and located errors as
PyYAML's own: for the whole invalid-file corpus, the example files and documents where the two are known to differ
(a byte-order mark, plain scalar styles, syntax error wording)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_provision.errors import SpecError
from gpu_provision.spec import load_cluster, yamlsafe

pytestmark = pytest.mark.skipif(yamlsafe.FAST_LOADER is None, reason="PyYAML built without libyaml")

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted((REPO / "tests" / "spec" / "invalid").glob("*.yaml"))
EXAMPLES = sorted((REPO / "inventory").glob("*.yaml"))
TRICKY = {
    "bom": "\ufeffversion: v1\ncluster: {name: x}\nnodes: []\n",
    "crlf": "a: 1\r\nb:\r\n  - x\r\n  - 'y'\r\n",
    "unicode": "a: café\nb: ü\n  c\nd: \"😀\"\ne: 012\n",
    "blocks": "---\na: |\n  l1\n  l2\nb: >\n  f\nc: \"q\\u00e9\"\nd: plain\n  more\ne:\nf: [1, {g: h},\n  2]\n",
    "anchors": "a: &x {k: v}\nb: *x\nc: !!str 5\nd:\n- 1\n- 2\n? e\n: f\n<<: {m: 1}\n",
    "duplicate": "a: 1\nb: 2\na: 3\n",
    "tag": "a: !!binary aGVsbG8=\n",
    "syntax": "a: {b: 1\nc: 2\n",
    "tab": "a:\n\t- 1\n",
    "tab-separator": "a:\tb\n",  # libyaml accepts it, PyYAML does not: the file goes to PyYAML alone
    "inner-bom": "---\n\ufeffa: 1\n",
}
#: Pieces of YAML whose random sequences reach both composers' corners: flow and block collections, explicit keys,
#: anchors, tags, merge keys, block scalars, directives, document markers, tabs, CRLF and byte-order marks.
PIECES = ["a", "b: ", "- ", "  ", "\n", ": ", "{", "}", "[", "]", ", ", "'x'", '"y\\n"', "|\n  t\n", ">\n  f\n",
          "&a ", "*a", "!!str ", "#c", "? ", "<<: ", "é", "\t", "\r\n", "\ufeff", "1", "0o7", "012", "~", "---\n",
          "...\n", "key", "  - ", "!x ", "%YAML 1.1\n"]


def _load(text: str, fast: bool) -> tuple[object, object]:
    try:
        value, positions = yamlsafe.load_yaml(text, "f.yaml", fast=fast)
    except SpecError as exc:
        return "error", [str(p) for p in exc.problems]
    return value, positions


@pytest.mark.parametrize("path", CORPUS + EXAMPLES, ids=lambda p: p.name)
def test_corpus_values_and_positions_are_the_same_from_either_composer(path: Path) -> None:
    text = path.read_text()
    assert _load(text, fast=True) == _load(text, fast=False)


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_documents_where_the_composers_differ_read_the_same(name: str) -> None:
    assert _load(TRICKY[name], fast=True) == _load(TRICKY[name], fast=False)


def _outcome(text: str, fast: bool) -> tuple[str, str]:
    try:
        value, _ = yamlsafe.load_yaml(text, "f.yaml", fast=fast)
    except SpecError:
        return "refused", ""
    return "accepted", repr(value)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=14).map("".join))
def test_both_composers_accept_the_same_documents_with_the_same_values(text: str) -> None:
    """Positions may differ only where no message can point (an empty value at the very end of the file), and
    load_cluster reports every problem from PyYAML's composition anyway."""
    assert _outcome(text, fast=True) == _outcome(text, fast=False)


def test_plain_scalars_stay_plain_under_libyaml() -> None:
    """A plain ``012`` is what YAML 1.1 reads as a number: messages say "quote it" only for plain scalars."""
    _, positions = yamlsafe.load_yaml("a: 012\nb: '012'\n", "f.yaml", fast=True)
    assert positions.plain(("a",)) and not positions.plain(("b",))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_invalid_file_is_refused_with_the_same_located_messages(path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def messages() -> list[str]:
        try:
            load_cluster(path)
        except SpecError as exc:
            return [str(p) for p in exc.problems]
        except Exception as exc:  # the corpus also holds files refused as unreadable
            return [f"{type(exc).__name__}: {exc}"]
        return []

    fast = messages()
    monkeypatch.setattr(yamlsafe, "FAST_LOADER", None)
    assert fast == messages()
    assert fast  # every corpus file is refused


def test_a_valid_file_is_composed_once_by_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    fast_class, slow_class = yamlsafe.FAST_LOADER, yaml.SafeLoader
    assert fast_class is not None

    class Fast(fast_class):  # type: ignore[misc,valid-type]
        def __init__(self, stream: str) -> None:
            used.append("libyaml")
            super().__init__(stream)

    class Slow(slow_class):  # type: ignore[misc,valid-type]
        def __init__(self, stream: str) -> None:
            used.append("pyyaml")
            super().__init__(stream)

    monkeypatch.setattr(yamlsafe, "FAST_LOADER", Fast)
    monkeypatch.setattr(yamlsafe.yaml, "SafeLoader", Slow)
    load_cluster(REPO / "inventory" / "cluster.yaml")
    assert used.count("libyaml") >= 1 and "pyyaml" not in used
    used.clear()
    with pytest.raises(SpecError):
        load_cluster(CORPUS[0])
    assert "pyyaml" in used  # refused: loaded again by PyYAML for its positions and wording

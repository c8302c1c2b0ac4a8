"""The MIG suggestion search is bounded: counts clamped to the profile table, identical GPUs share one answer.

Bounds are asserted as counts of placement searches, not wall-clock time, so a loaded machine cannot fail them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_provision.errors import SpecError
from gpu_provision.node.mig import placement
from gpu_provision.spec import catalog, load_cluster, mig


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every placement search run from here on; the suggestion cache starts empty."""
    mig._suggest.cache_clear()
    mig._plan.cache_clear()
    count = [0]
    real = placement.search

    def counting(table, wanted):
        count[0] += 1
        return real(table, wanted)

    monkeypatch.setattr(placement, "search", counting)
    return count


def test_every_profile_seven_times_tries_few_sub_layouts(searches: list[int]) -> None:
    table = catalog.model("H200").mig
    asked = {p.name: 7 for p in table.profiles}
    # Unclamped, this is 8**7 (two million) sub-layouts, each with a placement search.
    assert mig.suggest(table, asked) == {"1g.18gb": 6, "1g.35gb": 1}
    assert 0 < searches[0] <= 200


def test_identical_gpus_share_one_suggestion(tmp_path: Path, searches: list[int]) -> None:
    layout = ", ".join(f"{p.name}: 7" for p in catalog.model("H200").mig.profiles)
    path = tmp_path / "cluster.yaml"
    path.write_text(f"""version: v1
cluster:
  name: t
  kubernetes: {{enabled: false}}
nodes:
  - name: n1
    address: 10.0.0.1
    gpus: {{model: H200, count: 16}}
    mig:
      layout: {{{layout}}}
""")
    with pytest.raises(SpecError) as raised:
        load_cluster(path)
    problems = raised.value.problems
    assert len(problems) == 16 and all("a layout that fits: 1g.18gb x6 + 1g.35gb" in p.message for p in problems)
    one_gpu = searches[0]
    mig._suggest.cache_clear()
    mig._plan.cache_clear()
    searches[0] = 0
    mig.suggest(catalog.model("H200").mig, {p.name: 7 for p in catalog.model("H200").mig.profiles})
    # Sixteen GPUs cost one suggestion's searches plus one plan search per GPU.
    assert one_gpu <= searches[0] + 16


def test_suggestion_is_the_largest_fitting_sub_layout(searches: list[int]) -> None:
    table = catalog.model("H200").mig
    assert mig.suggest(table, {"3g.71gb": 2, "4g.71gb": 1}) == {"3g.71gb": 2}
    assert mig.suggest(table, {"7g.141gb": 1}) is None


def test_a_layout_that_fits_is_planned_once_for_every_gpu_asking_it(searches: list[int]) -> None:
    """A fleet file repeats a few layouts thousands of times: the second asker gets the first answer."""
    table = catalog.model("H200").mig
    layout = {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    first = mig.plan(table, layout)
    assert searches[0] == 1
    assert [mig.plan(table, dict(layout)) for _ in range(100)] == [first] * 100
    assert searches[0] == 1

"""MIG feasibility against every model's profile and placement table."""

from __future__ import annotations

import pytest

from gpu_provision.errors import MigLayoutError
from gpu_provision.node.mig.model import ProfileTable
from gpu_provision.spec import catalog, mig

MIG_MODELS = [k for k, m in catalog.models().items() if m.mig]


def _table(key: str) -> ProfileTable:
    table = catalog.model(key).mig
    assert table is not None
    return table


def _check_placements(table: ProfileTable, placements: tuple) -> None:
    used: set[int] = set()
    for p in placements:
        profile = table.profile(p.profile)
        assert p.start in profile.starts
        span = set(range(p.start, p.start + p.size))
        assert not span & used, f"overlap at {p}"
        assert max(span) < table.memory_slices
        used |= span
    assert sum(table.profile(p.profile).compute_slices for p in placements) <= table.compute_slices


@pytest.mark.parametrize("key", MIG_MODELS)
def test_every_all_single_profile_layout_fits(key: str) -> None:
    table = _table(key)
    for profile in table.profiles:
        counts = {profile.name: profile.max_instances}
        placements = mig.plan(table, counts)
        assert len(placements) == profile.max_instances
        _check_placements(table, placements)


@pytest.mark.parametrize("key", MIG_MODELS)
def test_balanced_layout_fits(key: str) -> None:
    table = _table(key)
    one = next(p.name for p in table.profiles if p.memory_slices == 1 and not p.media_extensions)
    two = next(p.name for p in table.profiles if p.compute_slices == 2)
    if table.memory_slices == 4:  # A30, RTX PRO 6000: all-balanced is 2 x 1g + 1 x 2g [GPU Operator default config]
        counts = {one: 2, two: 1}
    else:
        three = next(p.name for p in table.profiles if p.compute_slices == 3)
        counts = {one: 2, two: 1, three: 1}
    _check_placements(table, mig.plan(table, counts))


@pytest.mark.parametrize("key", MIG_MODELS)
def test_one_more_than_the_limit_does_not_fit(key: str) -> None:
    table = _table(key)
    for profile in table.profiles:
        with pytest.raises(MigLayoutError):
            mig.plan(table, {profile.name: profile.max_instances + 1})


def test_h200_issue_examples() -> None:
    table = _table("H200")
    placements = mig.plan(table, mig.parse_layout("1g.18gb x2 + 2g.35gb + 3g.71gb"))
    assert [(p.profile, p.start, p.size) for p in placements] == [
        ("2g.35gb", 0, 2), ("1g.18gb", 2, 1), ("1g.18gb", 3, 1), ("3g.71gb", 4, 4)]
    with pytest.raises(MigLayoutError) as info:
        mig.plan(table, mig.parse_layout("3g.71gb x3"))
    assert info.value.profile == "3g.71gb"
    assert info.value.suggestion == {"3g.71gb": 2}


def test_placement_not_slice_count_decides() -> None:
    # 3 x 2g (6 slices) + 2 x 1g (2 slices) = 8 memory slices, yet no 1g start reaches slice 7.
    table = _table("H200")
    with pytest.raises(MigLayoutError) as info:
        mig.plan(table, {"2g.35gb": 3, "1g.18gb": 2})
    assert info.value.profile == "1g.18gb"
    assert ("2g.35gb", 0, 2) in info.value.taken
    assert info.value.suggestion == {"2g.35gb": 3, "1g.18gb": 1}


def test_large_1g_and_3g_share_by_placement() -> None:
    table = _table("H200")
    placements = mig.plan(table, {"3g.71gb": 1, "1g.35gb": 2})
    _check_placements(table, placements)
    with pytest.raises(MigLayoutError):
        mig.plan(table, {"3g.71gb": 1, "1g.35gb": 3})


def test_compute_slices_bound() -> None:
    # 4g + 3g fill all 7 compute slices: nothing else fits although a 1g.35gb has 2 memory slices free nowhere.
    table = _table("H100-80GB")
    assert mig.fits(table, {"4g.40gb": 1, "3g.40gb": 1})
    assert not mig.fits(table, {"4g.40gb": 1, "2g.20gb": 2})


def test_h200_table_matches_driver_fixture(fixtures) -> None:
    text = (fixtures / "h200" / "nvidia-smi_mig_-lgipp.txt").read_text()
    table = _table("H200")
    for line in text.splitlines():
        parts = line.split()
        profile_id = int(parts[4])
        starts_text, size = line.split(": ", 1)[1].strip().split(":")
        starts = tuple(int(s) for s in starts_text.strip("{}").split(","))
        profile = table.profile(str(profile_id))
        assert profile is not None, profile_id
        assert profile.starts == starts
        assert profile.memory_slices == int(size)


def test_unknown_profile_names_allowed_ones() -> None:
    with pytest.raises(MigLayoutError) as info:
        mig.plan(_table("A100-40GB"), {"1g.18gb": 1})
    assert "allowed: 1g.5gb" in str(info.value)


def test_parse_layout_forms() -> None:
    assert mig.parse_layout("1g.18gb x2 + 3g.71gb") == {"1g.18gb": 2, "3g.71gb": 1}
    assert mig.parse_layout("1g.18gb=2,3g.71gb=1") == {"1g.18gb": 2, "3g.71gb": 1}
    assert mig.parse_layout("1g.18gb+me") == {"1g.18gb+me": 1}


def test_parse_layout_keeps_the_newer_suffixes() -> None:
    assert mig.parse_layout("1g.24gb+me.all + 1g.24gb-me x3") == {"1g.24gb+me.all": 1, "1g.24gb-me": 3}
    assert mig.parse_layout("1g.24gb+gfx x2+2g.48gb+gfx") == {"1g.24gb+gfx": 2, "2g.48gb+gfx": 1}
    assert mig.parse_layout("2g.48gb-me=1,1g.24gb+me=1,1g.24gb+gfx") == {
        "2g.48gb-me": 1, "1g.24gb+me": 1, "1g.24gb+gfx": 1}


def test_rtx_pro_6000_graphics_and_media_profiles() -> None:
    table = _table("RTX-PRO-6000")
    placements = mig.plan(table, mig.parse_layout("1g.24gb+gfx x2 + 2g.48gb-me"))
    assert [(p.profile, p.start, p.size) for p in placements] == [
        ("2g.48gb-me", 0, 2), ("1g.24gb+gfx", 2, 1), ("1g.24gb+gfx", 3, 1)]
    _check_placements(table, mig.plan(table, mig.parse_layout("1g.24gb+me.all + 1g.24gb-me x3")))
    _check_placements(table, mig.plan(table, mig.parse_layout("2g.48gb+me.all + 2g.48gb-me")))


def test_one_media_extension_instance_counts_me_all() -> None:
    table = _table("RTX-PRO-6000")
    with pytest.raises(MigLayoutError) as info:
        mig.plan(table, mig.parse_layout("1g.24gb+me + 1g.24gb+me.all"))
    assert "one media-extension instance at most" in str(info.value)


def test_only_me_less_instances_beside_me_all() -> None:
    table = _table("RTX-PRO-6000")
    # The suggestion keeps whichever instance holds more memory.
    for other, suggestion in (("1g.24gb", {"1g.24gb+me.all": 1}), ("1g.24gb+gfx", {"1g.24gb+me.all": 1}),
                              ("2g.48gb", {"2g.48gb": 1})):
        with pytest.raises(MigLayoutError) as info:
            mig.plan(table, {"1g.24gb+me.all": 1, other: 1})
        assert info.value.profile == other
        assert f"{other} cannot sit beside 1g.24gb+me.all" in str(info.value)
        assert info.value.suggestion == suggestion


def test_new_models_are_found_by_their_product_names() -> None:
    for name, key in (("NVIDIA B300", "B300"), ("NVIDIA GB200", "GB200"), ("NVIDIA GB300", "GB300"), ("NVIDIA H20", "H20"),
                      ("NVIDIA GH200 144G HBM3e", "GH200-144GB"),
                      ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000")):
        found = catalog.model(name)
        assert found is not None and found.key == key
        assert found.mig is not None and found.mig.placements_source


def test_gb300_table_matches_nvidia_dgx_station_playbook() -> None:
    """GB300: the profile IDs and names NVIDIA's DGX Station MIG playbook lists (driver R59x), the PCI ids the PCI ID
    Repository names GB300, the R595 MIG minimum of the MIG User Guide r620."""
    gb300 = catalog.model("GB300")
    assert gb300 is not None and gb300.mig is not None and catalog.model("gb300") == gb300
    assert gb300.pci_device_ids == ("0x31C210DE", "0x31C310DE", "0x31A110DE")
    assert {p.id: p.name for p in gb300.mig.profiles} == {
        19: "1g.35gb", 20: "1g.35gb+me", 15: "1g.70gb", 14: "2g.70gb", 9: "3g.139gb", 5: "4g.139gb", 0: "7g.278gb"}
    assert (gb300.min_driver, gb300.mig.min_driver) == ("580.82.07", "595.58.03")


def test_blackwell_ultra_mig_minimums_follow_the_mig_user_guide_r620() -> None:
    """r620's Deployment Considerations: B300 R580 (>= 580.82.07), GB300 (DGX Station) R595 (>= 595.58.03)."""
    minimums = {key: catalog.model(key).mig.min_driver for key in ("B300", "GB300")}  # type: ignore[union-attr]
    assert minimums == {"B300": "580.82.07", "GB300": "595.58.03"}


def test_gb300_layouts_the_playbook_names() -> None:
    """The playbook's layouts. 3g + 2 x 1g.70gb fits. 3g + 2g + 2g created in that order (``-cgi 9,14,14``) fails, the
    playbook says, because no 2g start is left after a 3g at 0; planned by placement it fits with the 3g at 4."""
    table = _table("GB300")
    placements = mig.plan(table, mig.parse_layout("3g.139gb + 1g.70gb x2"))
    assert [(p.profile, p.start, p.size) for p in placements] == [
        ("3g.139gb", 0, 4), ("1g.70gb", 4, 2), ("1g.70gb", 6, 2)]
    placements = mig.plan(table, mig.parse_layout("3g.139gb + 2g.70gb x2"))
    assert [(p.profile, p.start, p.size) for p in placements] == [
        ("2g.70gb", 0, 2), ("2g.70gb", 2, 2), ("3g.139gb", 4, 4)]
    with pytest.raises(MigLayoutError) as info:
        mig.plan(table, mig.parse_layout("3g.139gb + 2g.70gb x2 + 1g.35gb"))
    assert info.value.profile == "1g.35gb"

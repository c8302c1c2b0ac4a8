"""The allocatable check waits, bounded, for the device plugin to register its resources."""

from __future__ import annotations

from gpu_provision.node.verify import runtime


def _node(allocatable: dict[str, str]) -> dict:
    return {"status": {"allocatable": {"cpu": "2", **allocatable}}}


def test_waits_until_the_resources_appear(monkeypatch) -> None:
    answers = [_node({}), _node({}), _node({"nvidia.com/gpu": "4"})]
    monkeypatch.setattr(runtime, "read_node", lambda spec: (answers.pop(0), None))
    now = [0.0]
    node, error = runtime.read_node_settled({"allocatable": {"nvidia.com/gpu": 4}}, settle_s=60,
                                            clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert error is None and node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert now[0] == 4.0 and not answers


def test_gives_up_after_the_bound_with_what_it_saw(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(runtime, "read_node", lambda spec: (calls.append(1) or _node({"nvidia.com/gpu": "1"}), None))
    now = [0.0]
    node, error = runtime.read_node_settled({"allocatable": {"nvidia.com/gpu": 4}}, settle_s=10, interval_s=2,
                                            clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert error is None and node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert len(calls) == 6


def test_an_error_is_returned_at_once(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "read_node", lambda spec: (None, "kubectl: not found"))
    assert runtime.read_node_settled({"allocatable": {}}, settle_s=60, clock=lambda: 0.0,
                                     sleep=lambda s: None) == (None, "kubectl: not found")

"""The agent's own option parser: the words the controller, the CUDA children and the support archive pass."""

from __future__ import annotations

import pytest

from gpu_provision.node.verify.main import parse_args


def test_options_as_the_callers_pass_them() -> None:
    args = parse_args(["--expect", "/tmp/e.json", "--output", "/tmp/r.json", "--state", "--compact"])
    assert (args.expect, args.output, args.state, args.compact) == ("/tmp/e.json", "/tmp/r.json", True, True)
    assert (args.libcuda, args.cuda_probe, args.peer_probe) == ("libcuda.so.1", False, False)
    child = parse_args(["--cuda-probe", "--libcuda", "/opt/libcuda.so.1"])
    assert child.cuda_probe and child.libcuda == "/opt/libcuda.so.1" and child.expect is None
    assert parse_args(["--expect=/a b.json"]).expect == "/a b.json"


@pytest.mark.parametrize("argv", [["--bogus"], ["--expect"], ["--compact=yes"], ["expect.json"], ["-x"]])
def test_a_word_it_does_not_know_stops_it_with_usage_and_status_2(argv: list[str],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gpu-verify") and f"argument: {argv[0]}" in err


def test_help_prints_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert "--expect FILE: expectations JSON" in out and "--cuda-probe" not in out

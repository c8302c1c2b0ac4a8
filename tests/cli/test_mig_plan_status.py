"""``gpu-provision mig-plan`` exits as its help says: 0 a layout fits (or the profiles are listed), 1 it does not
fit, 2 an unknown model or profile, a model without MIG, or a layout argument that cannot be read (a count of 0,
-1, a leading zero or one too large to plan); in text and under ``--json``, with no traceback."""

from __future__ import annotations

import json

import pytest

from gpu_provision.cli import build_parser, main

CASES = [
    (["--gpu", "h200"], 0),
    (["--gpu", "H200", "1g.18gb x2 + 2g.35gb + 3g.71gb"], 0),
    (["--gpu", "h200", "1g.18gb=2,3g.71gb=1"], 0),
    (["--gpu", "h200", "7g.141gb x2"], 1),
    (["--gpu", "h200", "3g.71gb x3"], 1),
    (["--gpu", "h200", "1g.18gb x999"], 1),
    (["--gpu", "Z9"], 2),
    (["--gpu", "Z9", "1g.18gb"], 2),
    (["--gpu", "l40s", "1g.18gb"], 2),
    (["--gpu", "h200", "1g.99gb"], 2),
    (["--gpu", "h200", "1g.18gb + 1g.99gb x2"], 2),
    (["--gpu", "h200", "garbage"], 2),
    (["--gpu", "h200", "1g.18gb xx"], 2),
    (["--gpu", "h200", "1g.18gb x0"], 2),
    (["--gpu", "h200", "1g.18gb x-1"], 2),
    (["--gpu", "h200", "1g.18gb x07"], 2),
    (["--gpu", "h200", "1g.18gb x1000"], 2),
    (["--gpu", "h200", "1g.18gb x999 + 1g.18gb"], 2),
    (["--gpu", "h200", "1g.18gb x99999999999999"], 2),
    (["--gpu", "h200", "1g.18gb x" + "9" * 5000], 2),
]


@pytest.mark.parametrize(("args", "status"), CASES, ids=lambda v: " ".join(v)[:50] if isinstance(v, list) else None)
def test_exit_status_is_the_one_the_help_gives(args: list[str], status: int,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mig-plan", *args]) == status
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "unexpected" not in err
    if status == 2:
        assert not out and len(err.splitlines()) == 1, err
    assert main(["mig-plan", *args, "--json"]) == status
    out, err = capsys.readouterr()
    doc = json.loads(out)
    if status == 2:
        assert doc["error"]["kind"] == "error" and "unexpected" not in doc["error"]["message"]
    elif status == 1:
        assert doc["fits"] is False
    assert "Traceback" not in err


def test_unknown_profile_is_an_error_not_a_finding(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mig-plan", "--gpu", "h200", "1g.99gb"]) == 2
    assert capsys.readouterr().err.startswith("'1g.99gb' is not a MIG profile of H200 (allowed: 1g.18gb")


def test_a_missing_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["mig-plan", "1g.18gb"])
    assert caught.value.code == 2
    assert "--gpu" in capsys.readouterr().err


def test_help_says_these_statuses() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = sub.choices["mig-plan"].format_help()  # type: ignore[attr-defined]
    assert "exit status: 0 ok, 1 findings (the layout does not fit), 2 error (an unknown model or profile" in \
        " ".join(text.split())

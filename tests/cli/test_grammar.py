"""One grammar for every subcommand: ``--cluster``, ``--limit``, ``--json`` (errors included), exit statuses,
descriptions with examples, one line for an unexpected exception."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_provision import cli
from gpu_provision.commands.args import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, gpu_lines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "cluster.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The exit status (returned, or through SystemExit as for a usage error), standard output and error."""
    try:
        status = cli.main(list(argv))
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# --json: standard output is one JSON document, whatever happens


@pytest.mark.parametrize("argv", [
    ["validate", "--cluster", str(EXAMPLE)],
    ["plan", "--cluster", str(EXAMPLE)],
    ["mig-plan", "--gpu", "h200"],
    ["mig-plan", "--gpu", "H200", "3g.71gb x3"],
    ["export", "mig-parted", "-", "--cluster", str(EXAMPLE)],
    ["plan", "--cluster", "/nonexistent/cluster.yaml"],
    ["mig-plan", "--gpu", "Z9"],
    ["plan", "--no-such-flag"],
])
def test_json_output_is_only_json(capsys, argv):
    status, out, _ = run(capsys, *argv, "--json")
    json.loads(out)
    assert status in (EXIT_OK, EXIT_FINDINGS, EXIT_ERROR)


def test_errors_under_json_are_an_error_object_with_the_same_exit_status(capsys):
    status, out, err = run(capsys, "mig-plan", "--gpu", "Z9", "--json")
    assert status == EXIT_ERROR and err == ""
    assert json.loads(out) == {"error": {"message": json.loads(out)["error"]["message"], "kind": "error"}}
    assert json.loads(out)["error"]["message"].startswith("unknown GPU model 'Z9'")
    status, out, err = run(capsys, "plan", "--bogus", "--json")
    assert status == EXIT_ERROR and json.loads(out)["error"]["kind"] == "usage" and "--bogus" in out
    status, out, err = run(capsys, "mig-plan", "--gpu", "Z9")
    assert (status, out) == (EXIT_ERROR, "") and err.startswith("unknown GPU model 'Z9'")


def test_export_to_a_file_under_json_reports_on_stdout_and_talks_on_stderr(capsys, tmp_path):
    target = tmp_path / "layouts.yaml"
    status, out, err = run(capsys, "export", "mig-parted", str(target), "--cluster", str(EXAMPLE), "--json")
    assert status == EXIT_OK and json.loads(out)["wrote"] == str(target)
    assert err.startswith("wrote ") and target.read_text().startswith("version: v1")


def test_every_subcommand_takes_json_and_has_a_description_and_examples():
    for name, parser in subcommands().items():
        assert parser.description, name
        assert "examples:" in (parser.epilog or "") and "exit status: 0 ok, 1 findings" in parser.epilog, name
        assert any("--json" in a.option_strings for a in parser._actions), name


# --cluster FILE, with the older positional and the environment as the same


def test_cluster_flag_positional_and_environment_name_the_same_file(capsys, monkeypatch, tmp_path):
    by_flag = run(capsys, "plan", "--cluster", str(EXAMPLE), "--json")
    by_positional = run(capsys, "plan", str(EXAMPLE), "--json")
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(EXAMPLE))
    by_env = run(capsys, "plan", "--json")
    assert by_flag == by_positional == by_env and by_flag[0] == EXIT_OK
    assert run(capsys, "validate", "--cluster", str(EXAMPLE))[1].startswith(f"{EXAMPLE}: valid")


def test_two_different_cluster_files_or_none_at_all_are_errors(capsys, monkeypatch, tmp_path):
    status, _, err = run(capsys, "plan", str(EXAMPLE), "--cluster", "other.yaml")
    assert status == EXIT_ERROR and "two cluster files named" in err
    monkeypatch.delenv("GPU_PROVISION_CLUSTER", raising=False)
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, "export", "mig-parted", "-")
    assert status == EXIT_ERROR and "no cluster file" in err


def test_commands_that_read_the_cluster_file_take_cluster():
    for name in ("validate", "plan", "export", "drift", "verify"):
        assert any("--cluster" in a.option_strings for a in subcommands()[name]._actions), name


# --limit repeats, takes NAME,NAME, and never takes a positional


def test_limit_repeats_and_splits_on_commas_alike_everywhere():
    parser = cli.build_parser()
    for command in ("drift", "verify", "plan"):
        args = parser.parse_args([command, "--limit", "a", "--limit", "b,c"])
        assert args.limit == ["a", "b", "c"], command


def test_limit_never_takes_the_positional():
    parser = cli.build_parser()
    args = parser.parse_args(["drift", "--limit", "a", "site.py"])
    assert (args.limit, args.inventory) == (["a"], "site.py")
    args = parser.parse_args(["plan", "--limit", "a", "cluster.yaml"])
    assert (args.limit, args.file) == (["a"], "cluster.yaml")


def test_plan_limit_and_its_old_node_spelling(capsys):
    status, out, _ = run(capsys, "plan", "--cluster", str(EXAMPLE), "--limit", "l40s-01", "--json")
    assert status == EXIT_OK and [p["node"] for p in json.loads(out)] == ["l40s-01"]
    assert run(capsys, "plan", "--cluster", str(EXAMPLE), "--node", "l40s-01", "--json")[1] == out
    status, _, err = run(capsys, "plan", "--cluster", str(EXAMPLE), "--limit", "nope")
    assert status == EXIT_ERROR and "no node named nope" in err


def test_drift_and_verify_limit_only_the_named_unreachable_nodes_and_exit_2(capsys, down_cluster):
    status, out, _ = run(capsys, "drift", "--cluster", str(down_cluster), "--limit", "a,c", "--json")
    report = json.loads(out)
    assert status == EXIT_ERROR and [n["name"] for n in report["nodes"]] == ["a", "c"]
    status, out, _ = run(capsys, "verify", "--cluster", str(down_cluster), "--limit", "b", "--json")
    reports = json.loads(out)
    assert status == EXIT_ERROR and [(r["node"], r["status"]) for r in reports] == [("b", "error")]
    assert reports[0]["error"].startswith("unreachable: Could not connect")


def test_an_unknown_limit_name_is_an_error_in_json_too(capsys, down_cluster):
    status, out, _ = run(capsys, "verify", "--cluster", str(down_cluster), "--limit", "zz", "--json")
    assert status == EXIT_ERROR and "zz" in json.loads(out)["error"]["message"]


# Exit statuses, model names, unexpected exceptions


def test_exit_statuses_ok_findings_error(capsys):
    assert run(capsys, "mig-plan", "--gpu", "H200", "1g.18gb x2 + 2g.35gb + 3g.71gb")[0] == EXIT_OK
    assert run(capsys, "mig-plan", "--gpu", "H200", "3g.71gb x3")[0] == EXIT_FINDINGS
    assert run(capsys, "validate", "--cluster", "/nonexistent.yaml")[0] == EXIT_ERROR


def test_mig_plan_exit_statuses_are_the_ones_its_help_names(capsys):
    """``mig-plan --help`` names an unknown profile among the errors (2), beside a layout that does not fit (1)."""
    help_text = cli_help(capsys, "mig-plan")
    assert "1 findings (the layout does not fit)" in help_text and "2 error (an unknown model or profile" in help_text
    status, out, err = run(capsys, "mig-plan", "--gpu", "H200", "1g.99gb x2 + 3g.71gb")
    assert status == EXIT_ERROR and out == ""
    assert "'1g.99gb' is not a MIG profile of H200 (allowed: 1g.18gb," in err
    status, out, _ = run(capsys, "mig-plan", "--gpu", "H200", "1g.99gb", "--json")
    assert status == EXIT_ERROR and "1g.99gb" in json.loads(out)["error"]["message"]
    assert run(capsys, "mig-plan", "--gpu", "H200", "1g.18gb x9")[0] == EXIT_FINDINGS


def cli_help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """The ``--help`` text of ``command``, joined onto one line."""
    status, out, _ = run(capsys, command, "--help")
    assert status == EXIT_OK
    return " ".join(out.split())


@pytest.mark.parametrize("spelling", ["h200", "H200", "NVIDIA H200", "nvidia h200 nvl"])
def test_gpu_models_in_any_case_and_common_spellings(capsys, spelling):
    status, out, _ = run(capsys, "mig-plan", "--gpu", spelling, "--json")
    assert status == EXIT_OK and json.loads(out)["model"] == "H200"


def test_an_unexpected_exception_is_one_line_and_a_traceback_only_with_v():
    code = ("import sys; from gpu_provision import cli\n"
            "from gpu_provision.commands import spec\n"
            "def broken(args): raise ValueError('disk on fire')\n"
            "spec.validate = broken\n"
            "sys.exit(cli.main(sys.argv[1:]))\n")
    quiet = subprocess.run([sys.executable, "-c", code, "validate", str(EXAMPLE)], capture_output=True, text=True,
                           cwd=ROOT, timeout=60)
    assert quiet.returncode == EXIT_ERROR
    assert quiet.stderr == "unexpected ValueError: disk on fire (run with -v for the traceback)\n"
    loud = subprocess.run([sys.executable, "-c", code, "-v", "validate", str(EXAMPLE), "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert loud.returncode == EXIT_ERROR and "Traceback" in loud.stderr
    assert json.loads(loud.stdout) == {"error": {"message": "unexpected ValueError: disk on fire", "kind": "internal"}}


def test_identical_per_gpu_lines_collapse_into_ranges():
    assert gpu_lines({i: "MIG disabled" for i in range(8)}) == ["GPU 0-7: MIG disabled"]
    assert gpu_lines({0: "x", 1: "x", 2: "y", 3: "x", 5: "x"}) == ["GPU 0-1: x", "GPU 2: y", "GPU 3: x", "GPU 5: x"]
    assert gpu_lines({}) == []


def test_plan_says_it_is_desired_state_and_shows_no_gpu_stack_without_gpus(capsys):
    status, out, _ = run(capsys, "plan", "--cluster", str(EXAMPLE))
    assert status == EXIT_OK and out.startswith("desired state from the cluster file")
    plans = json.loads(run(capsys, "plan", "--cluster", str(EXAMPLE), "--json")[1])
    without = [p for p in plans if p["gpus"] == "none"]
    assert without and all(not {"driver", "toolkit", "mig", "device_plugin", "permissions"} & set(p) for p in without)
    assert all("driver" in p for p in plans if p["gpus"] != "none")


def test_no_two_models_share_a_spelling():
    from gpu_provision.spec import catalog

    seen: dict[str, str] = {}
    for model in catalog.models().values():
        for name in (model.key, *model.product_names):
            assert seen.setdefault(catalog.spelling(name), model.key) == model.key, name
    assert catalog.model("H100 80GB HBM3").key == catalog.model("h100-80gb").key == "H100-80GB"


def test_progress_is_one_line_rewritten_on_a_terminal_and_a_summary_line_everywhere():
    import io

    from gpu_provision.commands.args import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    ticks = iter([100.0, 112.34])
    log = io.StringIO()
    show = progress(log, clock=lambda: next(ticks))
    for counts in ((0, 0, 3), (1, 0, 3), (1, 1, 3), (2, 1, 3)):
        show(*counts)
    assert log.getvalue() == "3 nodes: 2 done, 1 failed (12.3 s)\n"
    ticks = iter([0.0, 4.0])
    screen = Terminal()
    show = progress(screen, clock=lambda: next(ticks))
    for counts in ((0, 0, 3), (1, 0, 3), (1, 1, 3), (2, 1, 3)):
        show(*counts)
    assert screen.getvalue() == ("\r0 done, 0 failed, 3 remaining\033[K\r1 done, 0 failed, 2 remaining\033[K"
                                 "\r1 done, 1 failed, 1 remaining\033[K\r3 nodes: 2 done, 1 failed (4.0 s)\033[K\n")


def test_a_bad_cluster_file_given_to_a_fleet_command_is_reported_as_validate_reports_it(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nnodes: 3\n")
    for command in ("drift", "verify"):
        status, out, _ = run(capsys, command, "--cluster", str(bad), "--json")
        error = json.loads(out)["error"]
        assert status == EXIT_ERROR and error["kind"] == "spec" and str(bad) in error["message"], command


def test_mig_assert_takes_cluster_and_its_old_node_file_spelling(capsys, tmp_path):
    for flag in ("--cluster", "--node-file"):
        status, out, _ = run(capsys, "mig-assert", flag, str(EXAMPLE), "--node", "nope", "--json")
        assert status == EXIT_ERROR and json.loads(out)["error"]["message"] == f"{EXAMPLE}: no node named nope"
    done = subprocess.run([sys.executable, "-m", "gpu_provision.commands.mig", "--cluster", str(EXAMPLE), "--node",
                           "nope", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == EXIT_ERROR and json.loads(done.stdout)["error"]["message"].endswith("no node named nope")

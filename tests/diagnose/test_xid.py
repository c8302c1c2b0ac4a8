"""The Xid data file: NVIDIA's catalogue as its source, every code the doctor must decode, each entry complete and
its action one of the catalogue's buckets; kernel-log lines in both formats parse."""

from __future__ import annotations

from gpu_provision.doctor.xid import xid_events, xid_table

REQUIRED = (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 154)


def test_catalogue_cites_its_source_and_holds_every_required_code():
    data = xid_table()
    assert data["source"]["url"].startswith("https://docs.nvidia.com/deploy/xid-errors/")
    for code in REQUIRED:
        entry = data["codes"][str(code)]
        assert entry["mnemonic"] and entry["description"], code
        assert entry["action"] in data["actions"], code
        assert entry["status"] in ("confirmed", "unconfirmed"), code


def test_kernel_log_formats_parse_and_unknown_codes_say_so():
    log = ("Nov 30 10:00:00 gpu-01 kernel: NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', GPU has fallen off the bus.\n"
           "[  12.5] NVRM: Xid (0000:17:00): 999, something new\n"
           "Nov 30 10:00:01 gpu-01 kernel: NVRM: GPU at PCI:0000:17:00: GPU-abc\n")
    events = xid_events(log)
    assert [(e.code, e.count, e.gpus) for e in events] == [(79, 1, ("0000:17:00",)), (999, 1, ("0000:17:00",))]
    assert events[1].entry()["status"] == "unknown" and events[1].action().startswith("CONTACT_SUPPORT")


def test_catalogue_immediate_actions_as_nvidia_lists_them():
    """Spot checks against the catalogue's Xids sheet, including the entries it corrected here (43 and 63 need no
    action, 61 is unused on Ampere and newer, 48 and 74 follow workflows)."""
    codes = xid_table()["codes"]
    assert {code: codes[str(code)]["action"] for code in (13, 43, 48, 61, 63, 74, 79, 94, 95, 119)} == {
        13: "RESTART_APP", 43: "IGNORE", 48: "WORKFLOW_XID_48", 61: "CONTACT_SUPPORT", 63: "IGNORE",
        74: "WORKFLOW_NVLINK_ERR", 79: "RESTART_BM", 94: "RESTART_APP", 95: "RESET_GPU", 119: "RESET_GPU"}


def test_xid_154_names_the_recovery_action_of_its_line():
    log = ("Dec 01 08:00:00 gpu-01 kernel: NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x0 "
           "(None) to 0x1 (GPU Reset Required)\n"
           "Dec 01 08:00:05 gpu-01 kernel: NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x1 "
           "(GPU Reset Required) to 0x2 (Node Reboot Required)\n")
    [event] = xid_events(log)
    assert event.action().startswith("XID_154: follow the recovery action the Xid 154 line names")
    assert event.action().endswith("; the last line names: Node Reboot Required")

"""Secure Boot under a real kernel: the probe's signing section and preflight against real firmware, shim and
``mokutil``.

The VM boots a Secure Boot box (:mod:`gpu_provision_rig.box`, Debian 12, then Debian 13): Debian's ``ovmf`` with
Microsoft's keys and Secure Boot on, the release's shim signed by Microsoft, its signed GRUB and kernel. What is real here: the firmware's
``SecureBoot`` and ``db`` variables; the ``MokListRT`` that shim hands the kernel (Debian's own CA, shim's built-in
vendor certificate), in both the places the kernel publishes it (efivarfs and ``/sys/firmware/efi/mok-variables``);
the kernel's lockdown; a certificate made with the exact ``openssl`` command dkms makes its own with; and
``mokutil --import``, which writes ``MokNew`` through the kernel's efivarfs into the VM's variable store. Each
state the probe reads is checked against ``mokutil --test-key`` on the same machine (lcp/mokutil, whose reading the
probe follows), and preflight's message through ``gpu-provision drift``, as the box's sudo user and as root.
Last, the kernel itself refuses a module signed with that certificate (the one a DKMS build would have signed the
driver with), and ``gpu-provision diagnose`` names the fault from the kernel's own log line.

Not done here: confirming an enrollment in the MOK Manager, which needs a person at the console during a boot.
Part of the real-package tier (:mod:`realpackages`): a Secure Boot box takes about a minute to build, a boot under
emulation about half a minute.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vmguest
from realpackages import SKIP_UNLESS_ASKED
from vmguest import cluster_doc, enable_root_login, vm_ssh, write_cluster

from gpu_provision.bundle import probe_command
from gpu_provision.state import Request
from gpu_provision_rig.box import SUITES, Box, ensure_box
from gpu_provision_rig.vm import Vm, VmSpec

pytestmark = [pytest.mark.rig, pytest.mark.slow, pytest.mark.vm, SKIP_UNLESS_ASKED]

REPO = Path(__file__).resolve().parents[2]
#: The rig itself only for the cluster file's controller folders: one plain node.
RIG_NODE_SHAPES = [(None, 0)]
VM = VmSpec("vmsb1", "127.0.12.3")
#: dkms's own command for its certificate (dell/dkms ``dkms.in``, ``prepare_mok``), at dkms's default paths.
CERT = "/var/lib/dkms/mok.pub"
MAKE_CERT = ("sudo -n mkdir -p /var/lib/dkms && sudo -n openssl req -new -x509 -nodes -days 36500 "
             "-subj '/CN=DKMS module signing key' -newkey rsa:2048 -keyout /var/lib/dkms/mok.key "
             f"-addext extendedKeyUsage=codeSigning -outform DER -out {CERT} 2>/dev/null")
#: Where the test points dkms's framework configuration at another certificate.
SITE_CONF = "/etc/dkms/framework.conf.d/zz-test.conf"
SIGNING = Request(sections={"signing"})
#: The password ``mokutil --import`` seals a request with (the MOK Manager asks for it at the console), as a hash.
PASSWORD = "gpu-provision"
HASH = "/root/mok.hash"
vm, login = vmguest.vm, vmguest.login  # the fixtures, by name


@pytest.fixture(scope="module", params=sorted(SUITES))
def box(rig, request: pytest.FixtureRequest) -> Box:  # type: ignore[no-untyped-def]
    """The Debian 12 Secure Boot box, then the Debian 13 one, from the rig's cache (built on first use)."""
    return ensure_box(rig.paths.cache, request.param, secure_boot=True)


@pytest.fixture(scope="module")
def guest(vm: Vm, login: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The booted VM's login, with dkms's certificate made as dkms makes it; any enrollment asked for is
    withdrawn at the end."""
    done = vm_ssh(login, f"{MAKE_CERT} && sudo -n mokutil --generate-hash={PASSWORD} | sudo -n tee {HASH} >/dev/null")
    assert done.returncode == 0, done.stderr
    yield login
    vm_ssh(login, "sudo -n mokutil --revoke-import >/dev/null 2>&1; true")


def signing(login: dict[str, Any]) -> dict[str, Any]:
    """The probe's signing section, read on the VM as root (through sudo) with the request the controller sends."""
    command = probe_command(SIGNING.to_probe(), keep=False)
    done = vm_ssh(login, f"sudo -n {command}")
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)["signing"]
    return answer


def mokutil_test_key(login: dict[str, Any], path: str) -> str:
    """What ``mokutil --test-key`` says of ``path`` (Debian 12's mokutil 0.6.0 exits 0 whether it is enrolled or
    not, so its words are the answer; later releases also exit 1 for "not enrolled")."""
    done = vm_ssh(login, f"sudo -n mokutil --test-key {path} 2>&1")
    return done.stdout.strip()


def test_the_guest_boots_with_secure_boot_and_shims_mok_list(box: Box, guest: dict[str, Any]) -> None:
    """The firmware says Secure Boot is on, the kernel is locked down, and shim's MokListRT holds Debian's CA."""
    assert box.secure_boot
    done = vm_ssh(guest, "mokutil --sb-state; cat /sys/kernel/security/lockdown; "
                         "ls /sys/firmware/efi/mok-variables/; sudo -n mokutil --list-enrolled | grep -c 'Subject:'")
    assert done.returncode == 0, done.stderr
    assert "SecureBoot enabled" in done.stdout
    assert "[integrity]" in done.stdout  # the kernel's lockdown under Secure Boot
    assert "MokListRT" in done.stdout.split()
    assert int(done.stdout.split()[-1]) >= 1


def test_the_probe_reads_the_firmware_as_mokutil_does(guest: dict[str, Any]) -> None:
    """Not enrolled, enrolled (a certificate shim put in MokListRT, named in dkms's framework files), awaiting
    enrollment after ``mokutil --import``, and missing: the probe and ``mokutil --test-key`` agree each time."""
    answer = signing(guest)
    assert answer == {"secure_boot": "enabled", "certificate": CERT, "state": "not-enrolled"}
    assert mokutil_test_key(guest, CERT) == f"{CERT} is not enrolled"

    # shim's own MOKs, as mokutil exports them (MOK-0001.der, ...), named in dkms's framework files.
    done = vm_ssh(guest, "sudo -n sh -c 'mkdir -p /root/moks /etc/dkms/framework.conf.d && cd /root/moks && "
                         "mokutil --export && ls'")
    assert done.returncode == 0, done.stderr
    exported = f"/root/moks/{done.stdout.split()[0]}"
    done = vm_ssh(guest, f"echo 'mok_certificate=\"{exported}\"' | sudo -n tee {SITE_CONF}")
    assert done.returncode == 0, done.stderr
    answer = signing(guest)
    assert answer == {"secure_boot": "enabled", "certificate": exported, "state": "enrolled", "list": "MokListRT"}
    assert mokutil_test_key(guest, exported) == f"{exported} is already enrolled"
    assert vm_ssh(guest, f"sudo -n rm {SITE_CONF}").returncode == 0

    # An enrollment asked for: MokNew, written through efivarfs, waits for the console at the next boot.
    done = vm_ssh(guest, f"sudo -n mokutil --import {CERT} --hash-file {HASH}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert signing(guest) == {"secure_boot": "enabled", "certificate": CERT, "state": "pending", "list": "MokNew"}
    assert mokutil_test_key(guest, CERT) == f"{CERT} is already in the enrollment request"

    done = vm_ssh(guest, f"sudo -n mv {CERT} {CERT}.kept")
    assert done.returncode == 0, done.stderr
    try:
        assert signing(guest) == {"secure_boot": "enabled", "certificate": CERT, "state": "missing"}
    finally:
        assert vm_ssh(guest, f"sudo -n mv {CERT}.kept {CERT}").returncode == 0


def drift(path: Path, stages: tuple[str, ...] = ("preflight",)) -> tuple[int, list[dict[str, Any]]]:
    """``gpu-provision drift --json`` of ``stages``: exit status and the node's differences."""
    argv = [sys.executable, "-m", "gpu_provision.cli", "drift", "--cluster", str(path), "--json",
            *(arg for stage in stages for arg in ("--stage", stage)), str(REPO / "inventory.py")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.stdout, proc.stderr[-3000:]
    (node,) = json.loads(proc.stdout)["nodes"]
    return proc.returncode, node["differences"]


@pytest.mark.parametrize("user", ["vagrant", "root"])
def test_preflight_names_the_certificate_and_what_to_do(rig, guest: dict[str, Any], user: str,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path) -> None:
    """Through the product (drift of the preflight stage, as the sudo user and as root): the node would build its
    driver with DKMS (Debian's default path), and preflight names dkms's certificate and its state."""
    if user == "root":
        enable_root_login(guest)
    doc = cluster_doc(rig, guest, user, VM.name)
    path = write_cluster(doc, tmp_path, user)
    vm_ssh(guest, "sudo -n mokutil --revoke-import >/dev/null 2>&1; true")
    status, differences = drift(path)
    found = [d for d in differences if d["item"] == "secure-boot"]
    assert status == 1 and len(found) == 1, differences
    assert f"its certificate {CERT} is not enrolled: enroll it with 'mokutil --import {CERT}'" in json.dumps(found)
    done = vm_ssh(guest, f"sudo -n mokutil --import {CERT} --hash-file {HASH}")
    assert done.returncode == 0, done.stdout + done.stderr
    status, differences = drift(path)
    found = [d for d in differences if d["item"] == "secure-boot"]
    assert status == 1 and len(found) == 1, differences
    assert f"its certificate {CERT} awaits enrollment (MokNew)" in json.dumps(found)


#: The site's own signing key and certificate (``driver.signing_key``, ``driver.signing_certificate``), made on the
#: node as a site's secret handling would put them there.
SITE_KEY, SITE_CERT = "/etc/pki/site/signing.key", "/etc/pki/site/signing.der"


def test_the_sites_signing_key_is_the_one_preflight_checks(rig, guest: dict[str, Any],  # type: ignore[no-untyped-def]
                                                          tmp_path: Path) -> None:
    """With ``driver.signing_key`` and ``driver.signing_certificate``: drift of preflight and the driver stage names
    the drop-in that has DKMS sign with them, and the site's certificate (not dkms's own) as not enrolled; without
    the key on the node, preflight says dkms would make a new pair in its place."""
    done = vm_ssh(guest, "sudo -n mkdir -p /etc/pki/site && sudo -n openssl req -new -x509 -nodes -days 3650 "
                         f"-subj '/CN=Site module signing' -newkey rsa:2048 -keyout {SITE_KEY} -outform DER "
                         f"-out {SITE_CERT} 2>/dev/null")
    assert done.returncode == 0, done.stderr
    doc = cluster_doc(rig, guest, "vagrant", VM.name)
    doc["nodes"][0]["driver"] = {"signing_key": SITE_KEY, "signing_certificate": SITE_CERT}
    path = write_cluster(doc, tmp_path, "vagrant")
    status, differences = drift(path, ("preflight", "driver"))
    found = {(d["kind"], d["item"]): d["actual"] for d in differences}
    assert status == 1 and found[("file", "/etc/dkms/framework.conf.d/gpu-provision-signing.conf")] == "absent"
    assert f"its certificate {SITE_CERT} is not enrolled" in found[("preflight", "secure-boot")]
    assert mokutil_test_key(guest, SITE_CERT) == f"{SITE_CERT} is not enrolled"
    assert vm_ssh(guest, f"sudo -n mv {SITE_KEY} {SITE_KEY}.kept").returncode == 0
    try:
        status, differences = drift(path, ("preflight",))
    finally:
        assert vm_ssh(guest, f"sudo -n mv {SITE_KEY}.kept {SITE_KEY}").returncode == 0
    found = {(d["kind"], d["item"]): d["actual"] for d in differences}
    assert status == 1 and found[("preflight", "module-signing")].startswith(f"{SITE_KEY} (driver.signing_key")
    assert ("preflight", "secure-boot") not in found


#: A module signed with dkms's certificate, as a DKMS build signs what it builds: Debian's own ``dummy`` module with
#: its signature taken off and a new one appended the way the kernel's ``sign-file`` appends it (a detached CMS
#: signature without attributes or certificates, the ``module_signature`` record, the marker; the kernel's
#: ``scripts/sign-file.c`` and ``include/linux/module_signature.h``).
SIGN_WITH_DKMS_KEY = """\
import lzma, struct, subprocess
path = subprocess.run(["modinfo", "-n", "dummy"], capture_output=True, text=True, check=True).stdout.strip()
data = open(path, "rb").read()
data = lzma.decompress(data) if path.endswith(".xz") else data
marker = b"~Module signature appended~\\n"
size = struct.unpack(">I", data[-len(marker) - 4:-len(marker)])[0]
open("/root/plain.ko", "wb").write(data[:-len(marker) - 12 - size])
subprocess.run(["openssl", "x509", "-inform", "DER", "-in", "/var/lib/dkms/mok.pub", "-out", "/root/mok.pem"],
               check=True)
subprocess.run(["openssl", "cms", "-sign", "-nocerts", "-noattr", "-binary", "-md", "sha256", "-in", "/root/plain.ko",
                "-signer", "/root/mok.pem", "-inkey", "/var/lib/dkms/mok.key", "-outform", "DER", "-out",
                "/root/sig.der"], check=True)
sig = open("/root/sig.der", "rb").read()
record = struct.pack(">BBBBBxxxI", 0, 0, 2, 0, 0, len(sig))  # PKEY_ID_PKCS7
open("/root/dkms-signed.ko", "wb").write(open("/root/plain.ko", "rb").read() + sig + record + marker)
"""


def test_the_kernel_refuses_a_module_signed_with_the_unenrolled_certificate_and_diagnose_names_it(
        rig, guest: dict[str, Any], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The kernel enforces signatures under Secure Boot: ``insmod`` of a module signed with dkms's (unenrolled)
    certificate fails with "Key was rejected by service", and ``gpu-provision diagnose`` finds the kernel's line."""
    done = vm_ssh(guest, f"sudo -n python3 -c {shlex.quote(SIGN_WITH_DKMS_KEY)} && "
                         "cat /sys/module/module/parameters/sig_enforce; sudo -n insmod /root/dkms-signed.ko")
    assert done.returncode != 0 and done.stdout.split() == ["Y"], done.stdout + done.stderr
    assert "Key was rejected by service" in done.stderr
    log = vm_ssh(guest, "sudo -n journalctl -k -b --no-pager | grep -c 'Loading of module with unavailable key is "
                        "rejected'")
    assert int(log.stdout.strip() or 0) >= 1, log.stdout + log.stderr
    doc = cluster_doc(rig, guest, "vagrant", VM.name)
    path = write_cluster(doc, tmp_path, "vagrant")
    out = tmp_path / "diagnose"
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "diagnose", str(REPO / "inventory.py"),
                           "--cluster", str(path), "--out", str(out), "--no-bug-report", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    (node,) = json.loads(proc.stdout)["nodes"]
    found = [f["detail"] for f in node["findings"] if f["rule"] == "module-signature-rejected"]
    assert found and found[0].startswith("the kernel rejected a module (module with unavailable key) x"), node
    assert found[0].endswith("; no NVIDIA module is loaded")

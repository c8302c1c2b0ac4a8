"""The site's DKMS signing key (``driver.signing_key``, ``driver.signing_certificate``): the driver stage's drop-in
that has DKMS sign with it, and preflight's checks of the two files and of the certificate's enrollment."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nodestates import fresh

from gpu_provision.desired import FileWant
from gpu_provision.spec import load_cluster
from gpu_provision.stages import driver, preflight
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")
KEY, CERT = "/etc/pki/site/signing.key", "/etc/pki/site/signing.der"
SITE = replace(H200, driver=replace(H200.driver, signing_key=KEY, signing_certificate=CERT))
DROP_IN = ("# Managed by gpu-provision: DKMS signs the modules it builds with the site's key (driver.signing_key, "
           "driver.signing_certificate)\n"
           f'mok_signing_key="{KEY}"\nmok_certificate="{CERT}"\n')


def test_the_drop_in_names_the_site_key_and_comes_before_the_driver_packages() -> None:
    state = NodeStateData(fresh("debian12", gpus=8))
    wants = driver.wants(SITE, CLUSTER, state)
    files = [w for w in wants if isinstance(w, FileWant) and w.path == driver.DKMS_SIGNING_CONF]
    assert files == [FileWant(driver.DKMS_SIGNING_CONF, content=DROP_IN)]
    first_package = next(i for i, w in enumerate(wants) if w.__class__.__name__ == "PackageWant"
                         and w.name in driver.driver_packages(SITE, state))
    assert wants.index(files[0]) < first_package  # DKMS builds in the packages' own install scripts
    assert driver.DKMS_SIGNING_CONF in driver.request(SITE, CLUSTER).contents
    assert not [w for w in driver.wants(H200, CLUSTER, state) if getattr(w, "path", "") == driver.DKMS_SIGNING_CONF]


def test_ubuntus_signed_precompiled_modules_need_no_drop_in() -> None:
    state = NodeStateData(fresh("ubuntu2404", gpus=8, secure_boot="enabled"))
    assert driver.signing_wants(SITE, state) == []


def test_a_drop_in_left_from_removed_settings_is_drift_and_removed() -> None:
    raw = fresh("debian12", gpus=8)
    raw["files"][driver.DKMS_SIGNING_CONF] = {"exists": True, "content": DROP_IN, "mode": "0644", "owner": "root",
                                             "group": "root"}
    state = NodeStateData(raw)
    assert driver.stale_signing(H200, state) == (f"{driver.DKMS_SIGNING_CONF} is there but the file sets no "
                                                 "driver.signing_key")
    found = [(d.kind, d.item, d.actual) for d in driver.extra_differences(H200, CLUSTER, state)]
    assert ("file", driver.DKMS_SIGNING_CONF, "present") in found
    assert driver.stale_signing(SITE, state) is None


def _findings(node, raw):  # type: ignore[no-untyped-def]
    return {(f.check, f.fatal): f.message for f in preflight.findings(node, CLUSTER, NodeStateData(raw))}


def test_preflight_sends_the_site_files_and_checks_them_whatever_secure_boot_says() -> None:
    sent = preflight.request(SITE, CLUSTER).to_probe()["signing"]
    assert sent["site"] == {"key": KEY, "certificate": CERT}
    assert "site" not in preflight.request(H200, CLUSTER).to_probe()["signing"]
    raw = fresh("debian12", gpus=8)
    raw["signing"] = {"secure_boot": "disabled", "site_missing": [KEY]}
    assert _findings(SITE, raw) == {("module-signing", True): (
        f"{KEY} (driver.signing_key, driver.signing_certificate) not on the node: put the site's signing key and "
        "certificate there first; dkms would make a new key pair in their place")}
    raw["signing"] = {"secure_boot": "disabled", "site_missing": []}
    assert _findings(SITE, raw) == {}


def test_under_secure_boot_the_site_certificate_is_the_one_that_must_be_trusted() -> None:
    raw = fresh("debian12", gpus=8, secure_boot="enabled")
    raw["signing"] = {"secure_boot": "enabled", "site_missing": [], "certificate": CERT, "state": "in-db",
                      "list": "db"}
    assert _findings(SITE, raw) == {}
    raw["signing"].update(state="not-enrolled")
    assert _findings(SITE, raw)[("secure-boot", True)] == (
        f"Secure Boot is on and the driver would be built by DKMS: its certificate {CERT} is not enrolled: enroll it "
        f"with 'mokutil --import {CERT}', reboot and confirm it in the MOK Manager at the node's console, or turn "
        "Secure Boot off")

"""The probe's signing section on fake firmware trees: DKMS's certificate found where dkms looks for it, and
the firmware's key lists read as ``mokutil --test-key`` reads them.

The lists are built here from the UEFI specification's layout (EFI_SIGNATURE_LIST: type GUID, list size, header
size, signature size, then owner GUID and data per signature), independently of the reader under test; the
certificates are real self-signed X.509 certificates made the way dkms makes its own (``/CN=DKMS module signing
key``, RSA 2048, code-signing usage, DER). Sources of every path and GUID: ``packages.json``, ``dkms_signing``.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from functools import cache
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpu_provision.node.probe import signing
from gpu_provision.state import Request

SHIM = "605dab50-e046-4300-abb6-3dd810dd8b23"
SECURITY_DB = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"
GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
X509 = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072").bytes_le
SHA256 = uuid.UUID("c1c41626-504c-4092-aca9-41f936934328").bytes_le
OWNER = uuid.UUID(SHIM).bytes_le
FACTS = Request(sections={"signing"}).to_probe()["signing"]


@cache
def certificate(name: str) -> bytes:
    """A DER certificate as dkms's prepare_mok makes one (openssl req -x509 ... -outform DER)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=36500))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


DKMS = certificate("DKMS module signing key")
OTHER = certificate("Some vendor's key")


def signature_list(kind: bytes, *entries: bytes) -> bytes:
    """One EFI_SIGNATURE_LIST of equal-sized entries, no signature header."""
    size = 16 + len(entries[0])
    body = b"".join(OWNER + e for e in entries)
    return kind + struct.pack("<III", 28 + len(body), 0, size) + body


def node(tmp_path: Path, secure_boot: bytes | None = b"\x01", os_id: str = "debian",
         cert: bytes | None = DKMS, cert_path: str = "var/lib/dkms/mok.pub") -> Path:
    """A node's tree: efivarfs with SecureBoot, os-release, and DKMS's certificate where dkms keeps it."""
    if secure_boot is not None:
        efivars = tmp_path / "sys/firmware/efi/efivars"
        efivars.mkdir(parents=True)
        (efivars / f"SecureBoot-{GLOBAL}").write_bytes(b"\x06\x00\x00\x00" + secure_boot)
    (tmp_path / "etc").mkdir(parents=True)
    (tmp_path / "etc/os-release").write_text(f'NAME="Some Linux"\nID={os_id}\nVERSION_ID="12"\n')
    if cert is not None:
        (tmp_path / cert_path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / cert_path).write_bytes(cert)
    return tmp_path


def efivar(root: Path, name: str, guid: str, data: bytes) -> None:
    """A variable as efivarfs shows it: 4 bytes of attributes, then the data."""
    (root / "sys/firmware/efi/efivars" / f"{name}-{guid}").write_bytes(b"\x06\x00\x00\x00" + data)


def read(root: Path) -> dict:  # type: ignore[type-arg]
    return signing.collect(FACTS, root=str(root))


def test_without_secure_boot_nothing_more_is_read(tmp_path: Path) -> None:
    assert read(node(tmp_path / "a", secure_boot=None)) == {"secure_boot": "not-efi"}
    assert read(node(tmp_path / "b", secure_boot=b"\x00")) == {"secure_boot": "disabled"}


def test_a_certificate_enrolled_as_a_mok_among_hashes_and_other_certificates(tmp_path: Path) -> None:
    root = node(tmp_path)
    lists = (signature_list(SHA256, b"\x11" * 32, b"\x22" * 32) + signature_list(X509, OTHER)
             + signature_list(X509, DKMS))
    efivar(root, "MokListRT", SHIM, lists)
    assert read(root) == {"secure_boot": "enabled", "certificate": "/var/lib/dkms/mok.pub", "state": "enrolled",
                          "list": "MokListRT"}


def test_a_long_mok_list_continues_in_numbered_variables(tmp_path: Path) -> None:
    root = node(tmp_path)
    efivar(root, "MokListRT", SHIM, signature_list(X509, OTHER))
    efivar(root, "MokListRT1", SHIM, signature_list(X509, DKMS))
    assert read(root)["state"] == "enrolled"


def test_shims_own_copy_is_read_first_without_attributes(tmp_path: Path) -> None:
    root = node(tmp_path)
    mok = root / "sys/firmware/efi/mok-variables"
    mok.mkdir(parents=True)
    (mok / "MokListRT").write_bytes(signature_list(X509, DKMS))
    assert read(root)["state"] == "enrolled"


def test_pending_in_db_and_blocked(tmp_path: Path) -> None:
    pending = node(tmp_path / "pending")
    efivar(pending, "MokListRT", SHIM, signature_list(X509, OTHER))
    efivar(pending, "MokNew", SHIM, signature_list(X509, DKMS))
    assert read(pending)["state"] == "pending"
    in_db = node(tmp_path / "db")
    efivar(in_db, "db", SECURITY_DB, signature_list(X509, OTHER) + signature_list(X509, DKMS))
    assert read(in_db)["state"] == "in-db"
    # Enrolled and denied: the deny list decides, as the kernel refuses what MokListX names.
    blocked = node(tmp_path / "blocked")
    efivar(blocked, "MokListRT", SHIM, signature_list(X509, DKMS))
    efivar(blocked, "MokListXRT", SHIM, signature_list(X509, DKMS))
    assert (read(blocked)["state"], read(blocked)["list"]) == ("blocked", "MokListXRT")


def test_not_enrolled_missing_and_a_broken_list(tmp_path: Path) -> None:
    other = node(tmp_path / "other")
    efivar(other, "MokListRT", SHIM, signature_list(X509, OTHER))
    assert read(other)["state"] == "not-enrolled"
    missing = node(tmp_path / "missing", cert=None)
    assert read(missing) == {"secure_boot": "enabled", "certificate": "/var/lib/dkms/mok.pub", "state": "missing"}
    # A list whose size runs past the variable's end is not read on: the certificate after it is not found.
    broken = node(tmp_path / "broken")
    whole = signature_list(X509, DKMS)
    efivar(broken, "MokListRT", SHIM, whole[:16] + struct.pack("<I", len(whole) + 100) + whole[20:])
    assert read(broken)["state"] == "not-enrolled"


def test_ubuntus_certificate_and_the_framework_files(tmp_path: Path) -> None:
    ubuntu = node(tmp_path / "ubuntu", os_id="ubuntu", cert_path="var/lib/shim-signed/mok/MOK.der")
    efivar(ubuntu, "MokListRT", SHIM, signature_list(X509, DKMS))
    assert read(ubuntu)["certificate"] == "/var/lib/shim-signed/mok/MOK.der"
    assert read(ubuntu)["state"] == "enrolled"
    # framework.conf.d is read after framework.conf, in name order; the last plain assignment wins, and a PEM
    # file (a site's own choice) is compared by its DER bytes.
    site = node(tmp_path / "site", cert=None)
    conf = site / "etc/dkms/framework.conf.d"
    conf.mkdir(parents=True)
    (site / "etc/dkms/framework.conf").write_text("# mok_certificate=/var/lib/dkms/mok.pub\n")
    (conf / "10-site.conf").write_text('mok_signing_key="/etc/site/key.pem"\nmok_certificate="/etc/site/a.pem"\n')
    (conf / "20-site.conf").write_text("mok_certificate=/etc/site/cert.pem  # ours\n")
    pem = x509.load_der_x509_certificate(DKMS).public_bytes(serialization.Encoding.PEM)
    (site / "etc/site").mkdir(parents=True)
    (site / "etc/site/cert.pem").write_bytes(pem)
    efivar(site, "MokListRT", SHIM, signature_list(X509, DKMS))
    assert (read(site)["certificate"], read(site)["state"]) == ("/etc/site/cert.pem", "enrolled")
    # A signing key of the site's own without a certificate: dkms then takes its own default, Ubuntu too.
    (conf / "20-site.conf").unlink()
    (conf / "10-site.conf").write_text('mok_signing_key="/etc/site/key.pem"\n')
    assert read(site)["certificate"] == "/var/lib/dkms/mok.pub"


def test_a_path_made_from_shell_variables_is_not_guessed(tmp_path: Path) -> None:
    root = node(tmp_path)
    (root / "etc/dkms").mkdir(parents=True)
    (root / "etc/dkms/framework.conf").write_text('mok_certificate="/etc/keys/${kernelver}.der"\n')
    answer = read(root)
    assert answer["state"] == "unknown"
    assert answer["reason"] == "the certificate's path is not a plain file name: /etc/keys/${kernelver}.der"


def test_the_sites_own_certificate_is_read_and_both_files_are_looked_for(tmp_path: Path) -> None:
    """With the site's files in the request, their presence is said whatever Secure Boot's state (dkms would make a
    new pair in place of a missing one), and under Secure Boot the site's certificate is the one checked."""
    site = {"key": "/etc/pki/site/signing.key", "certificate": "/etc/pki/site/signing.der"}
    request = {**FACTS, "site": site}
    off = node(tmp_path / "off", secure_boot=b"\x00", cert=DKMS, cert_path="etc/pki/site/signing.der")
    assert signing.collect(request, root=str(off)) == {"secure_boot": "disabled",
                                                       "site_missing": ["/etc/pki/site/signing.key"]}
    on = node(tmp_path / "on", cert=OTHER, cert_path="etc/pki/site/signing.der")
    (on / "etc/pki/site/signing.key").write_text("key\n")
    efivar(on, "db", SECURITY_DB, signature_list(X509, OTHER))
    assert signing.collect(request, root=str(on)) == {
        "secure_boot": "enabled", "site_missing": [], "certificate": "/etc/pki/site/signing.der", "state": "in-db",
        "list": "db"}

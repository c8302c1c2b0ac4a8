"""Module signing under Secure Boot: the certificate DKMS signs the modules it builds with, and whether the
firmware's key lists trust it, read the way ``mokutil --test-key`` reads them.

DKMS signs every module it builds (dkms 3.0 and later; Ubuntu's 2.8 with ``kmodsign``), and under Secure Boot the
kernel loads the NVIDIA module only when that certificate is enrolled. Where the certificate lives is a DKMS
setting the controller sends with the request (``packages.json``, ``dkms_signing``, with its source):
``mok_certificate`` in DKMS's framework configuration when set, else the distribution's default.

The key lists are EFI signature lists (UEFI specification, "EFI_SIGNATURE_LIST"): ``db`` (the firmware's own),
shim's ``MokListRT`` (the enrolled MOKs, a runtime copy of ``MokList``), ``MokNew`` (an enrollment asked for with
``mokutil --import``, confirmed at the console at the next boot) and the deny lists ``dbx`` and ``MokListXRT``
(rhboot/shim ``MokVars.txt``). Like mokutil (``src/mokutil.c``, ``is_duplicate``), the reader tries shim's
``/sys/firmware/efi/mok-variables`` copy first, then efivarfs, where a long list continues in ``MokListRT1``,
``MokListRT2`` and so on.
"""

import os
import struct

from .system import os_release, secure_boot


def _guid(text):
    """A GUID as EFI stores it: the first three fields little-endian, the rest as written."""
    a, b, c, d, e = text.split("-")
    return struct.pack("<IHH", int(a, 16), int(b, 16), int(c, 16)) + bytes.fromhex(d + e)


#: shim's vendor GUID (rhboot/shim lib/guid.c SHIM_LOCK_GUID): MokListRT, MokNew, MokListXRT.
SHIM = "605dab50-e046-4300-abb6-3dd810dd8b23"
#: The image security database's GUID (shim lib/guid.c EFI_SECURE_BOOT_DB_GUID): db and dbx.
SECURITY_DB = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"
#: The signature type of an X.509 certificate (shim lib/guid.c EFI_CERT_TYPE_X509_GUID).
X509 = _guid("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")
#: Which list answers what, in the order they decide: a denied certificate is denied wherever else it is listed.
LISTS = (("MokListXRT", SHIM, "blocked"), ("dbx", SECURITY_DB, "blocked"), ("db", SECURITY_DB, "in-db"),
         ("MokListRT", SHIM, "enrolled"), ("MokNew", SHIM, "pending"))
_HEADER = struct.Struct("<16sIII")


def certificates(data):
    """Every X.509 certificate (DER) in a variable's EFI signature lists; a malformed list ends the reading."""
    out, at = [], 0
    while at + _HEADER.size <= len(data):
        kind, size, header, each = _HEADER.unpack_from(data, at)
        if size < _HEADER.size + header or at + size > len(data) or (each <= 16 and size > _HEADER.size + header):
            break
        if kind == X509:
            entry = at + _HEADER.size + header
            while entry + each <= at + size:
                out.append(bytes(data[entry + 16:entry + each]))  # after the 16-byte owner GUID
                entry += each
        at += size
    return out


def _variable(root, name, guid):
    """The variable's data (every continuation of it), or None when the firmware has no such variable."""
    try:
        with open(os.path.join(root, "sys/firmware/efi/mok-variables", name), "rb") as f:
            data = f.read()
        if data:
            return data
    except OSError:
        pass
    parts = []
    for index in range(64):
        path = os.path.join(root, "sys/firmware/efi/efivars", "%s%s-%s" % (name, index or "", guid))
        try:
            with open(path, "rb") as f:
                parts.append(f.read()[4:])  # efivarfs puts the variable's 4-byte attributes first
        except OSError:
            break
    return b"".join(parts) if parts else None


def _setting(root, files, name):
    """The last plain ``name=value`` of DKMS's framework files in the order dkms sources them; a value made
    from shell variables (``${kernelver}``) is returned as written."""
    import glob  # here, not at the top: glob loads re, which every drift check would pay for on every node

    value = None
    for pattern in files:
        for path in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
            try:
                with open(path) as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            for line in lines:
                key, sep, rest = line.strip().partition("=")
                if sep and key == name:
                    value = rest.split("#", 1)[0].strip().strip("\"'")
    return value


def _der(data):
    """A certificate file's DER bytes: DKMS writes DER; a PEM file (its own choice in the framework file) too."""
    if b"-----BEGIN CERTIFICATE-----" not in data:
        return data
    import base64
    body = data.split(b"-----BEGIN CERTIFICATE-----", 1)[1].split(b"-----END CERTIFICATE-----", 1)[0]
    return base64.b64decode(b"".join(body.split()))


def certificate_path(root, facts, os_id):
    """Where DKMS keeps its certificate on this node: ``mok_certificate`` of the framework files, else the
    distribution's default (DKMS's own default when the framework files name only their own signing key)."""
    files = facts.get("framework_conf", [])
    chosen = _setting(root, files, "mok_certificate")
    if chosen:
        return chosen
    defaults = facts.get("certificate", {})
    if _setting(root, files, "mok_signing_key"):
        return defaults.get("default")
    return defaults.get(os_id, defaults.get("default"))


def collect(request, root="/"):
    """Secure Boot's state and, when it is on, DKMS's certificate and what the key lists say of it: ``enrolled``,
    ``in-db``, ``pending``, ``blocked``, ``not-enrolled``, ``missing`` (no certificate yet: DKMS makes one at its
    first build) or ``unknown`` (with the reason). With the site's own key and certificate in the request
    (``site``), that certificate is the one read, and whether both files are there is said whatever Secure Boot's
    state (``site_missing``): dkms makes a new pair in place of either one missing. ``root`` lets a fake tree stand
    in for the node's."""
    request = request or {}
    site = request.get("site") or {}
    state = secure_boot(os.path.join(root, "sys/firmware/efi/efivars"))
    out = {"secure_boot": state}
    if site:
        out["site_missing"] = sorted(path for path in site.values()
                                     if not os.path.isfile(os.path.join(root, path.lstrip("/"))))
    if state != "enabled":
        return out
    os_id = os_release(os.path.join(root, "etc/os-release")).get("ID", "")
    path = site.get("certificate") or certificate_path(root, request, os_id)
    out["certificate"] = path
    if not path or "$" in path or path.startswith("pkcs11:"):
        out.update(state="unknown", reason="the certificate's path is not a plain file name: %s" % path)
        return out
    try:
        with open(os.path.join(root, path.lstrip("/")), "rb") as f:
            cert = _der(f.read())
    except FileNotFoundError:
        out["state"] = "missing"
        return out
    except (OSError, ValueError) as exc:
        out.update(state="unknown", reason="cannot read %s: %s" % (path, exc))
        return out
    for name, guid, verdict in LISTS:
        data = _variable(root, name, guid)
        if data is not None and cert in certificates(data):
            out.update(state=verdict, list=name)
            return out
    out["state"] = "not-enrolled"
    return out

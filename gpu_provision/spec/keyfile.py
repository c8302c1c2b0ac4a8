"""Repository signing keys given as files on the controller (a mirror's ``key_file``): read bounded, checked, and
turned into the form each package manager reads.

Air-gapped sites often have the key only as a file. Fetching it on the node through a ``file://`` key URL would copy
whatever node file the URL names (``/etc/shadow``) into a world-readable keyring, so URLs stay http(s) and a local
key is read here, on the controller, and shipped: apt gets the binary keyring ``Signed-By`` names, dnf an
ASCII-armored copy its ``gpgkey=file://`` imports.
"""

from __future__ import annotations

import base64
import os

from gpu_provision.errors import SpecError
from gpu_provision.spec.yamlsafe import read_bounded

ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"
#: OpenPGP packet tag of a public key (RFC 4880 section 5.5.1.1).
_PUBLIC_KEY_TAG = 6


class KeyFileError(ValueError):
    """A key file that cannot be used; the message says why, for a located error at ``key_file``."""


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The OpenPGP public key in ``path`` as binary packets (an ASCII-armored file is dearmored).

    Raises :class:`KeyFileError` for a file that cannot be read, is not a regular file of at most the cluster
    file's size limit, or holds no OpenPGP public key.
    """
    try:
        data = read_bounded(path, "key file")
    except SpecError as exc:
        raise KeyFileError(exc.problems[0].message) from None
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from None
    text = data.lstrip()
    if text.startswith(ARMOR_BEGIN.encode()):
        data = _dearmor(text.decode("ascii", errors="replace"), str(path))
    if not _is_public_key(data):
        raise KeyFileError(f"{path} holds no OpenPGP public key (expected an ASCII-armored '{ARMOR_BEGIN}' block "
                           "or a binary key such as 'gpg --export' writes)")
    return data


def _dearmor(text: str, name: str) -> bytes:
    lines = [line.strip() for line in text.splitlines()]
    try:
        body = lines[lines.index("") + 1:lines.index(ARMOR_END)]
    except ValueError:
        raise KeyFileError(f"{name}: the armored key has no blank line after its headers or no '{ARMOR_END}'") \
            from None
    try:
        return base64.b64decode("".join(line for line in body if not line.startswith("=")), validate=True)
    except ValueError:
        raise KeyFileError(f"{name}: the armored key is not valid base64") from None


def _is_public_key(data: bytes) -> bool:
    if not data:
        return False
    first = data[0]
    if first & 0xC0 == 0xC0:  # new packet format: the tag is the low six bits
        return first & 0x3F == _PUBLIC_KEY_TAG
    return bool(first & 0x80) and (first >> 2) & 0x0F == _PUBLIC_KEY_TAG  # old format


def armor(binary: bytes) -> str:
    """``binary`` OpenPGP packets as an ASCII-armored public key block (with its CRC-24 checksum)."""
    body = base64.b64encode(binary).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    checksum = base64.b64encode(_crc24(binary).to_bytes(3, "big")).decode()
    return "\n".join([ARMOR_BEGIN, "", *lines, "=" + checksum, ARMOR_END]) + "\n"


def _crc24(data: bytes) -> int:
    """The armor checksum of RFC 4880 section 6.1."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF

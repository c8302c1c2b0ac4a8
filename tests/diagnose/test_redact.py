"""Secrets never leave the node: the one redaction hides each kind the bundle can hold, and a bundle written from
items full of secrets holds none of them."""

from __future__ import annotations

import tarfile

import pytest

from gpu_provision.node.diagnose.collect import write_archive
from gpu_provision.node.redact import redact, redact_text

TOKEN = "abcdef.0123456789abcdef"
CERT_KEY = "f" * 64
KEY_DATA = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo="
SA_TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.c2lnbmF0dXJl"

SECRETS = {
    "join command": (f"kubeadm join 10.0.0.1:6443 --token {TOKEN} --discovery-token-ca-cert-hash sha256:abc",
                     [TOKEN]),
    "certificate key": (f"kubeadm join 10.0.0.1:6443 --control-plane --certificate-key {CERT_KEY}", [CERT_KEY]),
    "kubeadm config": (f"certificateKey: {CERT_KEY}", [CERT_KEY]),
    "kubeconfig key": (f"    client-key-data: {KEY_DATA}", [KEY_DATA]),
    "kubeconfig token": (f"    token: {SA_TOKEN}", [SA_TOKEN]),
    "proxy": ("Environment=HTTPS_PROXY=http://svc-user:s3cr3t@proxy.example:3128", ["svc-user", "s3cr3t"]),
    "password": ("password=hunter2", ["hunter2"]),
    "registry auth json": ('{"auths": {"r": {"password": "hunter2", "token": "t0k"}}}', ["hunter2", "t0k"]),
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_secret_kind_is_hidden(name):
    line, secrets = SECRETS[name]
    hidden = redact(line)
    assert "***" in hidden
    for secret in secrets:
        assert secret not in hidden


def test_pem_private_key_body_is_hidden_and_plain_lines_kept():
    text = "ca.crt ok\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\nAoGBAL\n-----END EC PRIVATE KEY-----\nend"
    assert redact_text(text) == "ca.crt ok\n-----BEGIN EC PRIVATE KEY-----\n***\n-----END EC PRIVATE KEY-----\nend"
    assert redact_text("NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.") == (
        "NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.")


def test_bundle_from_items_with_secrets_holds_none(tmp_path):
    items = [(f"files/etc/{name.replace(' ', '-')}.conf", line.encode(), {"source": name})
             for name, (line, _) in SECRETS.items()]
    path = tmp_path / "bundle.tar.gz"
    write_archive(str(path), {}, found=items)
    with tarfile.open(path) as archive:
        text = "\n".join(archive.extractfile(m).read().decode() for m in archive.getmembers())
    for _, secrets in SECRETS.values():
        for secret in secrets:
            assert secret not in text
    assert "kubeadm join 10.0.0.1:6443" in text

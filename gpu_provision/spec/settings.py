"""Every cluster-file setting, described once: its type, allowed forms, description and default.

This description is the one source of a setting. From it come the JSON Schema (``schemas/cluster.v1.schema.json``,
with a ``default`` on every setting that has one), the typed model's defaults (:func:`default`, read by
:mod:`gpu_provision.spec.model`) and the reference page (:mod:`gpu_provision.spec.reference`). It is Python rather
than JSON because most of a schema is repetition (every object closed, every property described). After a change run
``python tools/gen_schema.py`` and ``python tools/gen_docs.py``; tests/test_docs.py fails while either file is stale.
A default here is what a setting is when the file leaves it out; values derived from other settings (the device
plugin's MIG strategy, the team namespace) are worked out by :mod:`gpu_provision.spec.resolve` and described in prose.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from itertools import chain
from typing import Any

from gpu_provision.spec import catalog
from gpu_provision.spec.defaults import KUBERNETES_MINORS, KUBERNETES_VERSION, TOOLKIT_VERSION, UPSTREAM
from gpu_provision.spec.dradata import CONTAINERD_MIN as DRA_CONTAINERD_MIN
from gpu_provision.spec.dradata import DRIVER_BRANCH_MIN as DRA_DRIVER_BRANCH_MIN
from gpu_provision.spec.dradata import DRIVER_IMAGE as DRA_DRIVER_IMAGE
from gpu_provision.spec.dradata import DRIVER_NAME as DRA_DRIVER_NAME
from gpu_provision.spec.dradata import KUBERNETES_MIN as DRA_KUBERNETES_MIN

DOCS = "docs/cluster-file.md"


def _obj(desc: str, props: dict[str, Any], required: tuple[str, ...] = (), **kw: Any) -> dict[str, Any]:
    """A closed mapping: unknown keys are errors, so a misspelt setting never passes silently."""
    out: dict[str, Any] = {"type": "object", "description": desc, "additionalProperties": False, "properties": props}
    if required:
        out["required"] = list(required)
    out.update(kw)
    return out


def _s(desc: str, **kw: Any) -> dict[str, Any]:
    """A string setting; a known pattern brings its plain-words form, which error messages quote."""
    out: dict[str, Any] = {"type": "string", "description": desc, **kw}
    if "pattern" in kw and kw["pattern"] in FORMS:
        out["x-allowed"] = FORMS[kw["pattern"]]
    return out


def _i(desc: str, **kw: Any) -> dict[str, Any]:
    """An integer setting."""
    return {"type": "integer", "description": desc, **kw}


def _b(desc: str, **kw: Any) -> dict[str, Any]:
    """A boolean setting."""
    return {"type": "boolean", "description": desc, **kw}


def _e(desc: str, values: list[str], **kw: Any) -> dict[str, Any]:
    """A setting with a fixed set of values."""
    return {"description": desc, "enum": values, **kw}


_VERSION = r"^[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?$"
#: An IPv4 or IPv6 CIDR (one address family: kubeadm's single-stack cluster), parsed again by the checks of meaning.
_CIDR = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9A-Fa-f:]{2,39}/[0-9]{1,3})$"
# Kubernetes' name grammar, from "Object Names and IDs" and "Labels and Selectors"
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/ and .../labels/#syntax-and-character-set):
# a DNS label is at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit; a DNS
# subdomain is dot-separated DNS labels, at most 253 in all; a label key (also an annotation and a taint key) is a
# name of at most 63 letters, digits, '-', '_' and '.' starting and ending with a letter or digit, optionally after
# a DNS-subdomain prefix and '/'; a label value is such a name or empty, at most 63.
_DNS_LABEL_PART = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN_PART = rf"{_DNS_LABEL_PART}(\.{_DNS_LABEL_PART})*"
_QUALIFIED_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY_PART = rf"((?=[^/]{{1,253}}/){_DNS_SUBDOMAIN_PART}/)?{_QUALIFIED_PART}"
_LABEL_VALUE_PART = rf"({_QUALIFIED_PART})?"
#: Names that are also Kubernetes names (a node's, a cluster's): a DNS subdomain of at most 63 characters.
_NAME = rf"^(?=.{{1,63}}$){_DNS_SUBDOMAIN_PART}$"
#: A namespace's name (a team's, which is its namespace's by default): a DNS label.
_DNS_LABEL = rf"^{_DNS_LABEL_PART}$"
LABEL_KEY = rf"^{_LABEL_KEY_PART}$"
LABEL_VALUE = rf"^{_LABEL_VALUE_PART}$"
_PROFILE = r"^[0-9]+g\.[0-9]+gb(\+me|\+me\.all|\+gfx|-me)?$"
#: Values that reach a node's apt or yum configuration: whole-value patterns without whitespace or control
#: characters, so a value cannot add a line (``gpgcheck=0``) to a file there.
_URL = r"^https?://[^\x00-\x20\x7f]+$"
#: A file on the controller: no control characters and not a URL.
_LOCAL_PATH = r"^(?![a-zA-Z][a-zA-Z0-9+.-]*://)[^\x00-\x1f\x7f]+$"
#: An http(s) URL or a file on the controller.
_MANIFEST = r"^(https?://[^\x00-\x20\x7f]+|(?![a-zA-Z][a-zA-Z0-9+.-]*://)[^\x00-\x1f\x7f]+)$"
_NODE_FILE = r"^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$"
_SUITE = r"^[A-Za-z0-9._{}/-]+$"
_COMPONENT = r"^[A-Za-z0-9._{}-]+$"
_REGISTRY = r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._/-]+)?$"
_TAINT = rf"^{_LABEL_KEY_PART}(={_LABEL_VALUE_PART})?:(NoSchedule|PreferNoSchedule|NoExecute)$"
#: A node's address: an IPv4 address as a dotted quad, an IPv6 address (with an optional interface scope of letters,
#: digits, '_', '.' and '-'), or an RFC 1123 host name (https://www.rfc-editor.org/rfc/rfc1123#section-2.1: letters,
#: digits and '-', labels of at most 63, 253 in all) that does not look like an IPv4 address: the section says a
#: valid host name never has the syntax of a dotted-decimal number, so no label-wise number form inet_aton(3) reads
#: ('10', '0x7f.1', '017.1') and no name whose last label is all digits ('999.1.1.1'). ipaddress checks the IP
#: forms again; the value is handed to SSH, so it never starts with '-' or holds spaces or shell characters.
_IPV4_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_IPV4_OCTET}(\.{_IPV4_OCTET}){{3}}"
#: At least two colons, as every IPv6 address has, so 'host:port' never reads as one.
_IPV6 = r"[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9_.-]{1,15})?"
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_INET_ATON_PART = r"(0[xX][0-9A-Fa-f]*|[0-9]+)"


def _host_name(end: str) -> str:
    """An RFC 1123 host name followed by ``end`` (a lookahead's end of the name): no label-wise inet_aton number,
    no last label of digits only, at most 253 characters."""
    return (rf"(?!{_INET_ATON_PART}(\.{_INET_ATON_PART})*\.?{end})(?!([^.:]*\.)*[0-9]+\.?{end})"
            rf"(?=[^:]{{1,253}}{end}){_HOST_LABEL}(\.{_HOST_LABEL})*\.?")


ADDRESS = rf"^({_IPV4}|{_IPV6}|{_host_name('$')})$"
#: The API server's endpoint: an address as above, then an optional port; an IPv6 address with a port in brackets.
ENDPOINT = rf"^(({_IPV4}|{_host_name('(:|$)')})(:[0-9]{{1,5}})?|{_IPV6}|\[{_IPV6}\](:[0-9]{{1,5}})?)$"
#: A GPU index in one spelling: '7', never '07' (two spellings of one GPU would let the second silently win).
_GPU_INDEX = r"^(0|[1-9][0-9]?)$"
#: A package version to pin: an optional epoch, then a version starting with a digit (Debian policy 5.6.12; rpm
#: versions are a subset), so it cannot start with '-' or hold spaces or shell characters.
_PACKAGE_VERSION = r"^([0-9]{1,4}:)?[0-9][A-Za-z0-9.+~_-]{0,63}$"
#: A Kubernetes user or group name as an authenticator reports it: letters, digits and ``. _ @ : + = -`` (e-mail
#: addresses, OIDC prefixes), starting with a letter or digit; no spaces, control or invisible characters.
_SUBJECT = r"^[A-Za-z0-9][A-Za-z0-9._@:+=-]{0,252}$"
#: An image reference: ``[registry[:port]/]path[:tag][@sha256:<64 hex digits>]``, the grammar of
#: distribution/reference (https://github.com/distribution/reference/blob/v0.5.0/reference.go, lines 4-26:
#: ``reference := name [":" tag] ["@" digest]``, ``domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*
#: [a-zA-Z0-9])/``, ``path-component := alpha-numeric [separator alpha-numeric]*``, ``separator := /[_.]|__|[-]*/``,
#: ``tag := /[\w][\w.-]{0,127}/``), the digest limited to sha256, the one algorithm registries serve. Every part
#: starts with a letter or digit, so a reference never reads as a command-line option. A digest pins the image's
#: content; a tag can be moved to other content. Written for both Python's ``re`` and JSON Schema (ECMA-262).
IMAGE_REFERENCE = (r"^([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?/)?"
                   r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
                   r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
IMAGE_REFERENCE_FORM = ("an image reference such as 'python:3.12-slim' or 'registry.internal:5000/python@sha256:' "
                        "followed by 64 hex digits")
#: Plain words for each pattern, quoted by error messages ("allowed: ...") and the reference page.
FORMS: dict[str, str] = {
    _VERSION: "a version such as '12.4' or '1.17.8' (quote it in YAML)",
    _CIDR: "an IPv4 CIDR such as '10.244.0.0/16' or an IPv6 CIDR such as 'fd00:10:244::/56'",
    _NAME: "lower-case letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or "
           "digit, at most 63",
    _DNS_LABEL: "lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63",
    LABEL_KEY: "a Kubernetes label key: an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, "
               "'-', '_' and '.' starting and ending with a letter or digit",
    LABEL_VALUE: "empty, or at most 63 letters, digits, '-', '_' and '.' starting and ending with a letter or digit",
    _GPU_INDEX: "a GPU index such as '0' or '7', without leading zeros",
    _PACKAGE_VERSION: "a package version such as '1.7.27-1' or '2.0.5-1', starting with a digit",
    _SUBJECT: "a user or group name of letters, digits and '.', '_', '@', ':', '+', '=', '-', starting with a letter "
              "or digit",
    _PROFILE: "a MIG profile name such as '1g.18gb', '1g.18gb+me', '1g.24gb+me.all', '1g.24gb+gfx' or '1g.24gb-me'",
    r"^[0-9]{3}$": "a three-digit driver branch such as '580'",
    r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2})?$": "a driver version such as '580.159.04'",
    r"^[0-9]+[bkmg]?$": "a size such as '64m' or '1g'",
    r"^[0-9]+[kmg]?$": "a size such as '100m'",
    r"^0?[0-7]{3}$": "an octal mode such as '0660' (quote it in YAML)",
    r"^[a-z_][a-z0-9_-]*$": "a Unix user or group name",
    r"^1\.[0-9]{2}\.[0-9]+$": "a Kubernetes version such as '1.36.4'",
    ADDRESS: "an IPv4 or IPv6 address, or an RFC 1123 host name such as 'gpu-01.lab' that does not look like an "
             "IPv4 address: no label-wise number such as '10' or '0x7f.1' and no last label of digits only",
    ENDPOINT: "an address or host name as nodes[].address takes it, then an optional ':PORT'; an IPv6 address with "
              "a port in brackets, such as '[fd00::10]:6443'",
    _TAINT: "key[=value]:Effect with a Kubernetes label key and value and Effect NoSchedule, PreferNoSchedule or "
            "NoExecute",
    IMAGE_REFERENCE: IMAGE_REFERENCE_FORM,
    _URL: "an http:// or https:// URL without spaces or control characters",
    _LOCAL_PATH: "a file path on the controller, relative to the cluster file or absolute, not a URL",
    _MANIFEST: "an http:// or https:// URL, or a file path on the controller (relative to the cluster file or "
               "absolute)",
    _NODE_FILE: "an absolute file path on the node of letters, digits, '.', '_', '-' and '/' such as "
                "'/etc/pki/site/signing.pem'",
    _SUITE: "an apt suite such as 'stable', '{codename}' or '/'",
    _COMPONENT: "an apt component such as 'stable' or 'main'",
    _REGISTRY: "a registry host such as 'registry.internal:5000', optionally with a path",
}


def _repository(name: str) -> dict[str, Any]:
    """A package repository and its key; left out, the upstream one (``UPSTREAM[name]``) is used."""
    upstream = UPSTREAM[name]
    components: dict[str, Any] = {"type": "array", "description": "apt components (empty for flat repositories).",
                                  "items": _s("One component, e.g. 'stable'.", pattern=_COMPONENT)}
    if "components" in upstream:
        components["default"] = upstream["components"]
    return _obj(
        "A package repository and its signing key. Point both at an internal mirror on air-gapped sites.",
        {
            "url": _s("Base URL of the repository (apt: the URL in the sources entry; yum: baseurl).", pattern=_URL),
            "key_url": {**_s("URL of the ASCII-armored or binary signing key; the deploy fetches it on the node, "
                             "installs it and references it with signed-by. Give key_url or key_file.", pattern=_URL),
                        "x-allowed": FORMS[_URL] + "; a key in a local file goes in key_file"},
            "key_file": _s("The signing key as a file on the controller (ASCII-armored or binary, e.g. what "
                           "'gpg --export' writes), relative to the cluster file or absolute, inside the cluster file's "
                           "directory or one of cluster.controller_dirs, for keys not served "
                           "over HTTP: the deploy reads it and writes it to each node, owned by root and mode 0644, as "
                           "/etc/apt/keyrings/NAME.gpg (apt) or /etc/pki/rpm-gpg/gpu-provision-NAME.asc (dnf). "
                           "Give key_url or key_file, not both.", minLength=1, pattern=_LOCAL_PATH),
            "suite": _s("apt suite; '/' for flat repositories (NVIDIA's CUDA and toolkit repositories, pkgs.k8s.io).",
                        pattern=_SUITE, default=upstream["suite"]),
            "components": components,
        },
        required=("url",),
        default=upstream,
    )


_ssh = _obj(
    "How the controller connects to nodes over SSH.",
    {
        "user": _s("Remote user; it needs root or passwordless sudo.", minLength=1, default="root"),
        "port": _i("SSH port.", minimum=1, maximum=65535, default=22),
        "key": _s("Private key file, relative to the cluster file or absolute, inside the cluster file's directory "
                  "or one of cluster.controller_dirs.", pattern=_LOCAL_PATH),
        "known_hosts": _s("known_hosts file to check host keys against, relative to the cluster file or absolute, "
                          "inside the cluster file's directory or one of cluster.controller_dirs.",
                          pattern=_LOCAL_PATH),
        "strict_host_key_checking": _b("Refuse unknown or changed host keys.", default=True),
        "connect_timeout": _i("Seconds to wait for a node to answer before reporting it unreachable.",
                              minimum=1, maximum=600, default=10),
        "command_timeout": _i("Seconds one remote command of a deploy may run (a package install, kubeadm, a MIG "
                              "change) before its node fails; pyinfra's _timeout data (--data _timeout=N) "
                              "overrides it.", minimum=10, maximum=86400, default=3600),
        "probe_timeout": _i("Seconds the node probe (the one command that reads what every stage compares, in "
                            "deploys and drift) may take; each command it runs on the node may take at most a "
                            "fifth of it and reads as timed out when it takes longer.", minimum=10, maximum=3600,
                            default=120),
    },
)

# A node's SSH settings default to the cluster's (cluster.ssh), not to the cluster's defaults.
_node_ssh = _obj("Per-node SSH overrides; a setting left out is the cluster's (cluster.ssh).",
                 {k: {key: v for key, v in _ssh["properties"][k].items() if key != "default"}
                for k in ("user", "port", "key")})

_layout = {
    "type": "object",
    "description": "MIG layout: profile name -> number of GPU instances, e.g. {'1g.18gb': 2, '3g.71gb': 1}. "
                   "Profiles are those of the node's GPU model (gpu-provision mig-plan --gpu MODEL lists them).",
    "propertyNames": {"pattern": _PROFILE, "x-allowed": FORMS[_PROFILE]},
    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 7,
                             "description": "Number of instances of this profile."},
}

_gpu_mig = _obj(
    "MIG settings of one GPU.",
    {
        "enabled": _b("Turn MIG mode on (true) or off (false) on this GPU."),
        "layout": _layout,
        "config": _s("Name of a configuration in the mig-parted file (cluster.mig_parted_file) to use for this GPU."),
    },
)

_mig = _obj(
    "MIG (Multi-Instance GPU) settings: a layout for all GPUs, or per GPU index.",
    {
        "enabled": _b("Turn MIG mode on or off on every GPU (default: on when a layout or config is given)."),
        "layout": _layout,
        "config": _s("Name of a configuration in the mig-parted file (cluster.mig_parted_file); the file's own "
                     "device filters and per-device entries apply."),
        "gpus": {
            "type": "object",
            "description": "Per-GPU settings by GPU index ('0', '1', ...); they replace the node-wide ones.",
            "propertyNames": {"pattern": _GPU_INDEX, "x-allowed": FORMS[_GPU_INDEX]},
            "additionalProperties": _gpu_mig,
        },
        "allow_drain": _b("When user processes hold a GPU that needs a MIG change, stop them instead of refusing.",
                          default=False),
        "allow_module_unload": _b("When the kernel modules nvidia_drm and nvidia_modeset keep the GPU reset that "
                                  "finishes a MIG mode change from running, unload them for the reset and load them "
                                  "again after it, instead of failing with their names.", default=False),
    },
)

#: Preflight checks a node's ``preflight.ignore`` may turn into warnings: the ones about the machine's size and its
#: GPUs, never the ones about what the install needs.
IGNORABLE_PREFLIGHT_CHECKS = ("gpus", "memory", "disk")

_node_props = {
    "role": _e("Node role in Kubernetes.", ["control-plane", "worker"], default="worker"),
    "labels": {"type": "object", "description": "Kubernetes node labels.",
               "propertyNames": {"pattern": LABEL_KEY, "x-allowed": FORMS[LABEL_KEY]},
               "additionalProperties": _s("Label value.", pattern=LABEL_VALUE)},
    "taints": {"type": "array", "description": "Kubernetes taints as key=value:Effect.",
               "items": _s("One taint.", pattern=_TAINT)},
    "ssh": _node_ssh,
    "packages": _obj(
        "The node's package manager.",
        {
            "lock_timeout": _i("Seconds a package operation waits for another process (unattended-upgrades, a second "
                               "apt) to release the package manager's lock before it fails (apt's "
                               "DPkg::Lock::Timeout; dnf waits for the holder by itself).",
                               minimum=0, maximum=86400, default=300),
        },
    ),
    "driver": _obj(
        "NVIDIA driver.",
        {
            "branch": {"type": ["string", "integer"], "description": "Driver branch to install and hold, e.g. 580.",
                       "pattern": r"^[0-9]{3}$", "minimum": 100, "maximum": 999,
                       "x-allowed": "a three-digit driver branch such as 580", "default": "580"},
            "version": _s("Exact driver version, e.g. '580.159.04'; overrides branch.",
                          pattern=r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2})?$"),
            "kernel_modules": _e("Kernel module flavour: open (Turing and newer), proprietary, or auto (open where "
                                 "the architecture supports it).", ["open", "proprietary", "auto"], default="auto"),
            "install_method": _e("'package': install NVIDIA's data-center driver from the repository; "
                                 "'distro': the OS's own driver packages (Debian: contrib/non-free, enabled in a "
                                 "sources file of gpu-provision's, branch 535 on Debian 12 and 550 on Debian 13, "
                                 "built by DKMS for the kernels the node boots: the running one, or, where the "
                                 "running kernel is not installed on the node (a container on its host's kernel), "
                                 "the installed one; Ubuntu: its server driver packages, as with 'package'; RHEL has "
                                 "none); 'preinstalled': a driver already on the node (a vendor image's, or NVIDIA's "
                                 "vGPU Manager), checked but never changed. A vGPU host (vgpu set) needs "
                                 "'preinstalled'.",
                                 ["package", "distro", "preinstalled"], default="package"),
            "reboot": _e("Whether the deploy may reboot the node when a driver or MIG change needs it.",
                         ["allowed", "never"], default="never"),
            "cuda_min": {"type": ["string", "number"], "description": "Minimum CUDA version the driver must support, "
                         "e.g. '12.4' (quote it: 12.10 unquoted reads as 12.1).", "pattern": _VERSION,
                         "minimum": 0, "maximum": 9999,
                         "x-allowed": "a CUDA version such as '12.4'"},
            "fabric_manager": {"type": ["boolean", "string"], "enum": ["auto", True, False], "default": "auto",
                               "description": "NVIDIA Fabric Manager with NSCQ, and NVLSM with infiniband-diags on "
                                              "NVLink 5 boards (HGX B200, B300): 'auto' installs them when the "
                                              "node's PCI bus has NVSwitches, or the ConnectX-7 bridges through "
                                              "which NVLink 5 boards reach theirs (SW_MNG in their VPD); true or "
                                              "false forces it, and preflight stops a node whose bus says "
                                              "otherwise."},
            "persistenced": _b("Enable nvidia-persistenced.", default=True),
            "signing_key": _s("The site's module signing key on the node (placed there by the site's own secret "
                              "handling, never by gpu-provision), with signing_certificate: DKMS signs the driver it "
                              "builds with them instead of a key of its own (a drop-in in /etc/dkms/framework.conf.d "
                              "sets mok_signing_key and mok_certificate), so under Secure Boot the certificate the "
                              "site enrolled once (as a MOK or in db) covers every node and every rebuild. Preflight "
                              "checks that both files are on the node and that the firmware trusts the certificate. "
                              "Only where the driver is built by DKMS (install_method: package or distro, except "
                              "Ubuntu's signed precompiled modules).", pattern=_NODE_FILE),
            "signing_certificate": _s("The certificate of signing_key on the node (DER or PEM), set with it.",
                                      pattern=_NODE_FILE),
            "hold_kernel": _b("Hold the running kernel's image and headers metapackages (apt-mark hold; dnf "
                              "versionlock of kernel, kernel-core and kernel-devel), installing them where missing, "
                              "so unattended upgrades cannot move the node to a kernel the driver was not built for "
                              "without the deploy. Only with install_method: package or distro.", default=False),
        },
    ),
    "container_runtime": _obj(
        "Container runtime.",
        {
            "kind": _e("docker (with containerd underneath) or containerd alone.", ["docker", "containerd"],
                       default="containerd"),
            "docker_source": _e("Where Docker comes from: Docker's repository (mirrors.docker) or the distribution's "
                                "docker.io package. With gpu_allocation: dra, distro is refused under Docker and "
                                "needs a containerd version of 2.0 or newer pinned (CDI).", ["docker", "distro"],
                                default="docker"),
            "default_shm_size": _s("Docker default-shm-size, e.g. '1g'.", pattern=r"^[0-9]+[bkmg]?$"),
            "log_max_size": _s("Container log rotation size (Docker log-opts max-size).", pattern=r"^[0-9]+[kmg]?$",
                               default="100m"),
            "log_max_file": _i("Rotated log files kept per container.", minimum=1, maximum=100, default=3),
            "version": _s("Exact runtime package version to pin (default: repository's newest).",
                          pattern=_PACKAGE_VERSION),
        },
    ),
    "toolkit": _obj(
        "nvidia-container-toolkit.",
        {
            "version": _s("Toolkit version, e.g. '1.17.8'. It decides how the runtime is configured: from 1.18 "
                          "containerd gets the nvidia runtime in the drop-in /etc/containerd/conf.d/99-nvidia.toml "
                          "that config.toml imports (as nvidia-ctk runtime configure --drop-in-config writes it: "
                          "config version 2 on containerd 1.7 with the whole CRI section repeated, version 3 on "
                          "containerd 2.x); before 1.18 nvidia-ctk edits config.toml itself. Docker's daemon.json "
                          "is merged by nvidia-ctk with every version.", pattern=_VERSION, default=TOOLKIT_VERSION),
            "cdi": _b("Keep a CDI spec current with the driver and the MIG layout (regenerated after every layout "
                      "change) and enable CDI in containerd: /etc/cdi/nvidia.yaml before toolkit 1.18; from 1.18 "
                      "/var/run/cdi/nvidia.yaml, which NVIDIA's nvidia-cdi-refresh.path (enabled by the deploy) "
                      "also regenerates after driver installs, and a static spec left by an older toolkit is "
                      "removed.", default=True),
            "default_runtime": _b("Make nvidia the runtime's default.", default=True),
        },
    ),
    "permissions": _obj(
        "Who may use the GPUs.",
        {
            "group": _s("Group that owns /dev/nvidia* (created if missing).", pattern=r"^[a-z_][a-z0-9_-]*$"),
            "mode": {"type": ["string", "integer"], "description": "Mode of /dev/nvidia* as octal, e.g. '0660'.",
                     "pattern": r"^0?[0-7]{3}$", "minimum": 0,
                     "x-allowed": "an octal mode such as '0660'", "default": "0666"},
            "users": {"type": "array", "description": "Users added to the group.",
                      "items": _s("User name.", pattern=r"^[a-z_][a-z0-9_-]*$")},
        },
    ),
    "gpus": _obj(
        "The GPUs the node is expected to have (checked by preflight and verification).",
        {
            "model": _s("GPU model key, in any case and with or without NVIDIA's brand (product names as nvidia-smi "
                        "prints them also work): " + ", ".join(catalog.packaged_keys()) + "."),
            "count": _i("Number of GPUs.", minimum=0, maximum=16, default=0),
        },
    ),
    "mig": _mig,
    "vgpu": _obj(
        "vGPU host settings (SR-IOV GPUs with NVIDIA's vGPU host driver). The vGPU Manager comes from the NVIDIA "
        "Licensing Portal, not from a package repository: install it first and set driver.install_method: "
        "preinstalled.",
        {
            "type": _s("vGPU type for every GPU's virtual functions, e.g. 'NVIDIA H200X-141C'."),
            "gpus": {"type": "object", "description": "vGPU type per GPU index.",
                     "propertyNames": {"pattern": _GPU_INDEX, "x-allowed": FORMS[_GPU_INDEX]},
                     "additionalProperties": _s("vGPU type name.")},
        },
    ),
    "sharing": _obj(
        "GPU sharing offered by the device plugin.",
        {
            "strategy": _e("none, time-slicing or mps.", ["none", "time-slicing", "mps"], default="none"),
            "replicas": _i("Replicas each GPU is advertised as (time-slicing and MPS need at least 2).",
                           minimum=1, maximum=64, default=1),
            "rename_by_default": _b("Advertise shared GPUs as nvidia.com/gpu.shared.", default=False),
        },
    ),
    "device_plugin": _obj(
        "NVIDIA device plugin.",
        {"mig_strategy": _e("How MIG devices are advertised: none, single or mixed. Left out on a node with MIG on: "
                            "single when every GPU has the same layout of one profile, else mixed.",
                            ["none", "single", "mixed"], default="none")},
    ),
    "preflight": _obj(
        "Preflight checks, which stop a node before any stage changes it.",
        {
            "ignore": {"type": "array", "uniqueItems": True, "default": [],
                       "description": "Checks whose failure is only a warning on this node, as kubeadm's "
                       "--ignore-preflight-errors makes them: 'gpus' (the GPUs on the PCI bus are not the ones "
                       "the file lists: a GPU-less image-build host or test VM), 'memory' and 'disk' (below "
                       "preflight's minimums). Checks that guard the install itself (OS, Secure Boot, kernel "
                       "modules, pinning, Kubernetes skew) cannot be ignored, and verification still fails a "
                       "node without its GPUs.",
                       "items": _e("A check preflight may only warn about.", list(IGNORABLE_PREFLIGHT_CHECKS))},
        },
    ),
    "verify": _obj(
        "Verification thresholds.",
        {
            "bandwidth_min_ratio": {"type": "number", "minimum": 0.1, "maximum": 1.0,
                                    "description": "Flag a GPU whose measured memory bandwidth is below this "
                                                   "fraction of the model's figure.", "default": 0.85},
            "container_image": _s("Image used for the container check (default: built on the node from its own "
                                  "files).", pattern=IMAGE_REFERENCE),
        },
    ),
}

NODE_SETTINGS = _obj("Node settings; used in defaults, groups and nodes (node over group over defaults).", _node_props)

_node = _obj(
    "One node.",
    {
        "name": _s("Node name (also its Kubernetes node name).", pattern=_NAME),
        "address": {**_s("Address or host name the controller connects to.", minLength=1, pattern=ADDRESS),
                    "x-problem": "is not an IP address or a host name"},
        "group": _s("Node group whose settings this node inherits."),
        **_node_props,
    },
    required=("name", "address"),
)

#: Pod Security Standards a team namespace may enforce. 'privileged' is not offered: it would let a team member run
#: privileged or hostPath pods on the GPU nodes, which is what the labels are there to stop.
POD_SECURITY_LEVELS = ("baseline", "restricted")

_team = _obj(
    "A team: namespace, GPU quota and access.",
    {
        "name": _s("Team name (also its namespace's name by default, and a label value).", pattern=_DNS_LABEL),
        "namespace": _s("Namespace (default: the team name).", pattern=_DNS_LABEL),
        "gpus": _i("Quota on whole GPUs: requests.nvidia.com/gpu; with gpu_allocation: dra, the devices of "
                   "the gpu.nvidia.com DeviceClass.", minimum=0, maximum=1_000_000, default=0),
        "mig": {"type": "object", "description": "Quota per MIG resource, by profile name; with gpu_allocation: "
                "dra, a DeviceClass per profile (mig-<profile>.gpu.nvidia.com, '.' and '+' spelt '-' and "
                "'-plus-'), quota on its devices and a ResourceClaimTemplate naming it.",
                "propertyNames": {"pattern": _PROFILE, "x-allowed": FORMS[_PROFILE]},
                "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 1_000_000,
                                         "description": "Instances."}},
        "users": {"type": "array", "description": "Users bound to the team's role; not 'system:' users (a "
                  "service account goes in service_accounts) and no wildcards.",
                  "items": _s("User.", pattern=_SUBJECT)},
        "groups": {"type": "array", "description": "Groups bound to the team's role; not 'system:' groups "
                   "(system:authenticated would open the namespace to every user) and no wildcards.",
                   "items": _s("Group.", pattern=_SUBJECT)},
        "service_accounts": {"type": "array", "description": "Service accounts of the team's own namespace bound "
                             "to the team's role, by name.", "items": _s("Service account name.", pattern=_NAME)},
        "pod_security": _e("Pod Security Standard the namespace enforces (default: "
                           "cluster.kubernetes.pod_security).", list(POD_SECURITY_LEVELS)),
    },
    required=("name",),
)

_kubernetes = _obj(
    "The Kubernetes cluster (kubeadm).",
    {
        "enabled": _b("Install Kubernetes on the nodes.", default=True),
        "version": _s("Kubernetes version, e.g. '1.36.4'; kubelet, kubeadm and kubectl are pinned to it. Supported "
                      f"minors: {', '.join(KUBERNETES_MINORS)} (those upstream still maintains). Changed on a "
                      "running cluster, it is upgraded as kubeadm documents (kubeadm upgrade apply on the first "
                      "control plane, kubeadm upgrade node on the others, then kubelet and kubectl): one minor "
                      "forward at a time, or any patch of the running minor; a minor back is refused.",
                      pattern=r"^1\.[0-9]{2}\.[0-9]+$", default=KUBERNETES_VERSION),
        "pod_cidr": _s("Pod network CIDR.", pattern=_CIDR, default="10.244.0.0/16"),
        "service_cidr": _s("Service network CIDR.", pattern=_CIDR, default="10.96.0.0/12"),
        "control_plane_endpoint": {**_s("Stable address (host[:port]) of the API server; default: the first "
                                        "control plane's address.", pattern=ENDPOINT),
                                   "x-problem": "is not an API server endpoint"},
        "cni": _e("CNI plugin.", ["flannel", "calico", "cilium"], default="flannel"),
        "cni_manifest": _s("The CNI manifest (override for air-gapped sites): an http(s) URL the first control plane "
                           "fetches, or a file on the controller (relative to the cluster file or absolute, a regular "
                           "file within the cluster file's size limit inside the cluster file's directory or one of "
                           "cluster.controller_dirs) that the deploy reads and ships.",
                           pattern=_MANIFEST),
        "device_plugin_image": _s("NVIDIA device plugin image; GPU Feature Discovery runs from the same image (its "
                                  "gpu-feature-discovery command), so a digest pins both and mirrors.registry "
                                  "replaces the registry of both.", pattern=IMAGE_REFERENCE,
                                  default="nvcr.io/nvidia/k8s-device-plugin:v0.17.2"),
        "gpu_allocation": _e("How pods get GPUs. 'device-plugin': NVIDIA's device plugin advertises nvidia.com/gpu "
                             "(and MIG resources) as extended resources. 'dra': NVIDIA's DRA driver "
                             f"({DRA_DRIVER_NAME}) publishes each node's GPUs and MIG devices in ResourceSlices; pods "
                             "claim them through ResourceClaims (each team gets a ResourceClaimTemplate per whole GPU "
                             "and per MIG profile it may use), and plain nvidia.com/gpu requests keep working through "
                             "the gpu.nvidia.com DeviceClass's extendedResourceName. The device plugin is not deployed "
                             f"then. 'dra' needs Kubernetes {DRA_KUBERNETES_MIN} or newer, NVIDIA driver "
                             f"{DRA_DRIVER_BRANCH_MIN} or newer and containerd {DRA_CONTAINERD_MIN} or newer (CDI), and "
                             "no sharing strategy (time-slicing and MPS are device plugin settings).",
                             ["device-plugin", "dra"], default="device-plugin"),
        "dra_driver_image": _s("NVIDIA DRA driver image (gpu_allocation: dra). Pin it by digest "
                               "('...:v0.4.1@sha256:...') to run the same content everywhere; mirrors.registry "
                               "replaces its registry.", pattern=IMAGE_REFERENCE, default=DRA_DRIVER_IMAGE),
        "node_feature_discovery": _b("Node Feature Discovery runs in the cluster (deployed by the site, e.g. from "
                                     "NFD's own chart): GPU Feature Discovery then publishes its labels through "
                                     "NFD's NodeFeature API and verification checks the GPU labels "
                                     "(nvidia.com/gpu.product, gpu.memory, mig.capable, mig.strategy, "
                                     "gpu.sharing-strategy). Off: GPU Feature Discovery writes them to "
                                     "/etc/kubernetes/node-feature-discovery/features.d/gfd on each node, which "
                                     "only an NFD worker turns into node labels, and verification skips the check. "
                                     "With gpu_allocation: dra, GPU Feature Discovery runs (without the device "
                                     "plugin) only when this is on, and its labels are verified the same way.",
                                     default=False),
        "teams": {"type": "array", "description": "Teams and their GPU quotas.", "items": _team},
        "pod_security": _e("Pod Security Standard every team namespace enforces unless the team sets its own "
                           "(Pod Security Admission labels: enforce, audit and warn at this level; enforce pinned "
                           "to the cluster's Kubernetes minor, audit and warn at 'latest' so an upgrade's stricter "
                           "rules show as warnings before they are enforced). 'baseline' refuses privileged, "
                           "hostPath and host-namespace pods; 'restricted' also demands non-root containers that "
                           "drop every capability.", list(POD_SECURITY_LEVELS), default="baseline"),
        "verification": _obj(
            "The in-cluster verification DaemonSet (gpu-provision verify --in-cluster --manifest).",
            {
                "image": _s("Image the verification pod runs (any image with python3 3.9 or newer; the NVIDIA "
                            "runtime adds nvidia-smi). Pin it by digest ('python:3.12-slim@sha256:...') to run the "
                            "same content everywhere; mirrors.registry replaces its registry.",
                            pattern=IMAGE_REFERENCE, default="python:3.12-slim"),
                "tolerations": {"type": "array",
                                "description": "Taints the verification pod tolerates, written as node taints "
                                               "are (key:Effect tolerates any value, key=value:Effect that value). "
                                               "The taints the cluster file sets on the verified nodes are "
                                               "tolerated too; no other taint is.",
                                "items": _s("One taint to tolerate.", pattern=_TAINT),
                                "default": ["nvidia.com/gpu:NoSchedule"]},
            },
        ),
        "monitoring": _obj(
            "GPU monitoring.",
            {
                "dcgm_exporter": _b("Run the DCGM exporter on GPU nodes.", default=True),
                "dcgm_exporter_image": _s("DCGM exporter image.", pattern=IMAGE_REFERENCE,
                                          default="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"),
                "prometheus_scrape_file": _s("Where to write a Prometheus scrape configuration for the exporters on "
                                             "the first control plane: an absolute path in normal form inside "
                                             "/etc/prometheus/ or /etc/gpu-provision/ (letters, digits, '.', '_', "
                                             "'-' and '/')."),
            },
        ),
    },
)

#: ``rollout.max_unavailable`` as a percentage of a node group (``25%``); Kubernetes' maxUnavailable form.
PERCENT = r"^([1-9][0-9]?|100)%$"

_rollout = _obj(
    "How a change that disrupts GPU work rolls across the nodes (gpu-provision rollout plan shows the batches). "
    "Changes that disrupt nothing go to every node at once; the others go in batches, control-plane nodes alone.",
    {
        "max_parallel": _i("Nodes changed at once (the GPU Operator's maxParallelUpgrades).", minimum=1,
                           maximum=100_000, default=1),
        "max_unavailable": {"type": ["integer", "string"], "minimum": 1, "maximum": 100_000, "pattern": PERCENT,
                            "x-allowed": "a node count such as 2, or a percentage of a node group such as '25%'",
                            "description": "Nodes of one node group (nodes without a group form one) that may be "
                                           "unavailable at once: a count, or a percentage of the group rounded "
                                           "down but at least 1 (as Kubernetes' maxUnavailable).",
                            "default": "25%"},
        "wait_for_jobs": _obj(
            "Waiting for GPU jobs to finish on a cordoned node before it is changed.",
            {
                "timeout": _i("Seconds to wait for the GPU jobs; 0 waits without limit (the GPU Operator's "
                              "waitForCompletion.timeoutSeconds).", minimum=0, maximum=604800, default=0),
                "pod_selector": _s("Label selector of the pods waited for, e.g. 'app=training'; left out, every pod "
                                   "that requests an nvidia.com GPU resource."),
            },
        ),
        "pod_deletion": _obj(
            "Evicting the GPU pods still on a cordoned node once the wait for jobs is over, through the Eviction "
            "API so that PodDisruptionBudgets are respected (the GPU Operator's gpuPodDeletion).",
            {
                "timeout": _i("Seconds the GPU pods may take to go before the node is drained (drain.enable) "
                              "or fails its rollout.", minimum=1, maximum=604800, default=300),
                "force": _b("Also evict GPU pods that no controller manages (bare pods, not recreated "
                            "elsewhere), as kubectl drain --force.", default=False),
                "delete_empty_dir": _b("Also evict GPU pods with emptyDir volumes, whose data is lost, as kubectl "
                                       "drain --delete-emptydir-data.", default=False),
            },
        ),
        "drain": _obj(
            "Draining a node (every pod but DaemonSet pods, through the Eviction API) when its GPU pods could "
            "not be evicted.",
            {
                "enable": _b("Drain the node when pod deletion did not empty it of GPU pods; off, such a node "
                             "fails its rollout.", default=False),
                "timeout": _i("Seconds the drain may take before the node fails its rollout.", minimum=1,
                              maximum=604800, default=300),
                "force": _b("Also evict pods that no controller manages.", default=False),
                "delete_empty_dir": _b("Also evict pods with emptyDir volumes, whose data is lost.",
                                       default=False),
            },
        ),
        "gpu_containers": _e(
            "On nodes outside Kubernetes: what the rollout does with running containers that hold a GPU (found "
            "through docker or ctr: a GPU device request, the nvidia runtime, or NVIDIA_VISIBLE_DEVICES): "
            "refuse fails the node, wait waits for them up to wait_for_jobs.timeout, stop stops them.",
            ["refuse", "wait", "stop"], default="refuse"),
    },
)

_mirrors = _obj(
    "Download locations. Each can point at an internal mirror for air-gapped sites.",
    {
        **{name: _repository(name) for name in ("cuda", "container_toolkit", "docker", "kubernetes")},
        "registry": _s("Registry host that replaces the registry of every container image, e.g. "
                       "'registry.internal:5000'.", pattern=_REGISTRY),
        "package_proxy": _s("HTTP proxy for the nodes' package manager, e.g. 'http://10.0.0.1:3142'.", pattern=_URL),
    },
)

#: The cluster file's JSON Schema, as written to schemas/cluster.v1.schema.json.
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://gpu-provision.dev/schemas/cluster.v1.schema.json",
    "title": "gpu-provision cluster file, version v1",
    "description": "One file describes a GPU cluster: its nodes, their GPU stack and the Kubernetes cluster. "
                   f"Reference: {DOCS}",
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "cluster", "nodes"],
    "properties": {
        "version": {"const": "v1", "description": "File format version; must be 'v1'."},
        "cluster": _obj(
            "Cluster-wide settings.",
            {
                "name": _s("Cluster name.", pattern=_NAME),
                "kubernetes": _kubernetes,
                "mirrors": _mirrors,
                "ssh": _ssh,
                "rollout": _rollout,
                "mig_parted_file": _s("A mig-parted 'version: v1' file whose named configs nodes can use "
                                      "(mig.config), relative to this file, inside this file's directory or one of "
                                      "controller_dirs.", pattern=_LOCAL_PATH),
                "controller_dirs": {"type": "array", "default": [],
                                    "description": "Directories on the controller, besides this file's own, that "
                                                   "settings naming a controller file (ssh.key, ssh.known_hosts, "
                                                   "mirrors.*.key_file, kubernetes.cni_manifest, mig_parted_file) "
                                                   "may read from, relative to this file or absolute; symbolic links "
                                                   "are resolved before the check, so a link cannot lead out.",
                                    "items": _s("One directory.", pattern=_LOCAL_PATH)},
            },
            required=("name",),
        ),
        "defaults": NODE_SETTINGS,
        "groups": {"type": "object", "description": "Node groups by name; a node names its group with 'group'.",
                   "propertyNames": {"pattern": _NAME, "x-allowed": FORMS[_NAME]}, "additionalProperties": NODE_SETTINGS},
        "nodes": {"type": "array", "description": "The nodes.", "minItems": 1, "items": _node},
    },
}



#: Where node settings stop being listed under ``defaults`` and ``groups``: the reference lists them once, by themselves.
_NODE_SETTINGS_AT = ("defaults", "groups.<name>")


def entries(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every setting under ``node`` with its path as the reference page writes it.

    Paths read ``cluster.ssh.port``, ``nodes[].name``, ``mig.gpus.<index>.layout``. Under :data:`SCHEMA` the node
    settings are not repeated for ``defaults``, ``groups.<name>`` and ``nodes[]``; walk :data:`NODE_SETTINGS` for them.
    """
    if path:
        yield path, node
        if path in _NODE_SETTINGS_AT:
            return
    for name, sub in node.get("properties", {}).items():
        if path == "nodes[]" and name in _node_props:
            continue
        yield from entries(sub, f"{path}.{name}" if path else name)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and (extra.get("type") == "object" or "properties" in extra):
        key = "<index>" if "index" in str(node.get("propertyNames", {})) else "<name>"
        yield from entries(extra, f"{path}.{key}")
    items = node.get("items")
    if isinstance(items, dict) and items.get("type") == "object":
        yield from entries(items, f"{path}[]")


@cache
def defaults() -> dict[str, Any]:
    """The default of every setting that has one, by path: ``cluster.ssh.port`` or, for node settings, ``driver.reboot``."""
    found = chain(entries(SCHEMA), entries(NODE_SETTINGS))
    return {path: sub["default"] for path, sub in found if "default" in sub}


def default(path: str) -> Any:
    """The default of the setting at ``path``; a path without one raises KeyError (a typo fails at import)."""
    return defaults()[path]

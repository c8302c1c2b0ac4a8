"""Writes schemas/cluster.v1.schema.json.

The schema is kept as Python here because most of it is repetition (every object closed, every property described);
the JSON it writes is the file users and editors read. Run: python tools/gen_schema.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs/cluster-file.md"


def obj(desc: str, props: dict, required: tuple[str, ...] = (), **kw) -> dict:
    out = {"type": "object", "description": desc, "additionalProperties": False, "properties": props}
    if required:
        out["required"] = list(required)
    out.update(kw)
    return out


FORMS = {}


def s(desc: str, **kw) -> dict:
    out = {"type": "string", "description": desc, **kw}
    if "pattern" in kw and kw["pattern"] in FORMS:
        out["x-allowed"] = FORMS[kw["pattern"]]
    return out


def i(desc: str, **kw) -> dict:
    return {"type": "integer", "description": desc, **kw}


def b(desc: str, **kw) -> dict:
    return {"type": "boolean", "description": desc, **kw}


def e(desc: str, values: list, **kw) -> dict:
    return {"description": desc, "enum": values, **kw}


VERSION = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"
CIDR = r"^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$"
NAME = r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$"
PROFILE = r"^[0-9]+g\.[0-9]+gb(\+me)?$"
FORMS.update({
    VERSION: "a version such as '12.4' or '1.17.8' (quote it in YAML)",
    CIDR: "an IPv4 CIDR such as '10.244.0.0/16'",
    NAME: "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63",
    PROFILE: "a MIG profile name such as '1g.18gb' or '1g.18gb+me'",
    r"^[0-9]{3}$": "a three-digit driver branch such as '580'",
    r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2})?$": "a driver version such as '580.159.04'",
    r"^[0-9]+[bkmg]?$": "a size such as '64m' or '1g'",
    r"^[0-9]+[kmg]?$": "a size such as '100m'",
    r"^0?[0-7]{3}$": "an octal mode such as '0660' (quote it in YAML)",
    r"^[a-z_][a-z0-9_-]*$": "a Unix user or group name",
    r"^1\.[0-9]{2}\.[0-9]+$": "a Kubernetes version such as '1.31.4'",
    "^[0-9]{1,2}$": "a GPU index such as '0'",
})

repository = obj(
    "A package repository and its signing key. Point both at an internal mirror on air-gapped sites.",
    {
        "url": s("Base URL of the repository (apt: the URL in the sources entry; yum: baseurl).", minLength=1),
        "key_url": s("URL of the ASCII-armored or binary signing key; the deploy installs it and references it "
                     "with signed-by.", minLength=1),
        "suite": s("apt suite; '/' for flat repositories (NVIDIA's CUDA and toolkit repositories, pkgs.k8s.io)."),
        "components": {"type": "array", "description": "apt components (empty for flat repositories).",
                       "items": s("One component, e.g. 'stable'.")},
    },
    required=("url", "key_url"),
)

ssh = obj(
    "How the controller connects to nodes over SSH.",
    {
        "user": s("Remote user; it needs root or passwordless sudo.", minLength=1),
        "port": i("SSH port.", minimum=1, maximum=65535),
        "key": s("Private key file, relative to the cluster file or absolute."),
        "known_hosts": s("known_hosts file to check host keys against, relative to the cluster file or absolute."),
        "strict_host_key_checking": b("Refuse unknown or changed host keys (default true)."),
        "connect_timeout": i("Seconds to wait for a node to answer before reporting it unreachable.",
                             minimum=1, maximum=600),
    },
)

node_ssh = obj("Per-node SSH overrides.", {k: ssh["properties"][k] for k in ("user", "port", "key")})

layout = {
    "type": "object",
    "description": "MIG layout: profile name -> number of GPU instances, e.g. {'1g.18gb': 2, '3g.71gb': 1}. "
                   "Profiles are those of the node's GPU model (gpu-provision mig-plan --gpu MODEL lists them).",
    "propertyNames": {"pattern": PROFILE, "x-allowed": FORMS[PROFILE]},
    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 7,
                             "description": "Number of instances of this profile."},
}

gpu_mig = obj(
    "MIG settings of one GPU.",
    {
        "enabled": b("Turn MIG mode on (true) or off (false) on this GPU."),
        "layout": layout,
        "config": s("Name of a configuration in the mig-parted file (cluster.mig_parted_file) to use for this GPU."),
    },
)

mig = obj(
    "MIG (Multi-Instance GPU) settings: a layout for all GPUs, or per GPU index.",
    {
        "enabled": b("Turn MIG mode on or off on every GPU (default: on when a layout or config is given)."),
        "layout": layout,
        "config": s("Name of a configuration in the mig-parted file (cluster.mig_parted_file); the file's own "
                    "device filters and per-device entries apply."),
        "gpus": {
            "type": "object",
            "description": "Per-GPU settings by GPU index ('0', '1', ...); they replace the node-wide ones.",
            "propertyNames": {"pattern": "^[0-9]{1,2}$", "x-allowed": "a GPU index such as '0'"},
            "additionalProperties": gpu_mig,
        },
        "allow_drain": b("When user processes hold a GPU that needs a MIG change, stop them instead of refusing."),
    },
)

node_props = {
    "role": e("Node role in Kubernetes.", ["control-plane", "worker"]),
    "labels": {"type": "object", "description": "Kubernetes node labels.",
               "additionalProperties": s("Label value.", maxLength=63)},
    "taints": {"type": "array", "description": "Kubernetes taints as key=value:Effect.",
               "items": s("One taint.", pattern=r"^[A-Za-z0-9./_-]+(=[A-Za-z0-9._-]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$")},
    "ssh": node_ssh,
    "driver": obj(
        "NVIDIA driver.",
        {
            "branch": {"type": ["string", "integer"], "description": "Driver branch to install and hold, e.g. 580.",
                       "pattern": r"^[0-9]{3}$", "minimum": 100, "maximum": 999,
                       "x-allowed": "a three-digit driver branch such as 580"},
            "version": s("Exact driver version, e.g. '580.159.04'; overrides branch.",
                         pattern=r"^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2})?$"),
            "kernel_modules": e("Kernel module flavour: open (Turing and newer), proprietary, or auto (open where "
                                "the architecture supports it).", ["open", "proprietary", "auto"]),
            "install_method": e("'package': install from the repository; 'preinstalled': a vendor image's driver, "
                                "checked but never changed.", ["package", "preinstalled"]),
            "reboot": e("Whether the deploy may reboot the node when a driver or MIG change needs it.",
                        ["allowed", "never"]),
            "cuda_min": {"type": ["string", "number"], "description": "Minimum CUDA version the driver must support, "
                         "e.g. '12.4' (quote it: 12.10 unquoted reads as 12.1).", "pattern": VERSION,
                         "x-allowed": "a CUDA version such as '12.4'"},
            "fabric_manager": b("Install NVIDIA Fabric Manager (NVSwitch systems). Default: on for 8-GPU "
                                "H100/H200/B200 nodes."),
            "persistenced": b("Enable nvidia-persistenced."),
        },
    ),
    "container_runtime": obj(
        "Container runtime.",
        {
            "kind": e("docker (with containerd underneath) or containerd alone.", ["docker", "containerd"]),
            "docker_source": e("Where Docker comes from: Docker's repository (mirrors.docker) or the distribution's "
                               "docker.io package.", ["docker", "distro"]),
            "default_shm_size": s("Docker default-shm-size, e.g. '1g'.", pattern=r"^[0-9]+[bkmg]?$"),
            "log_max_size": s("Container log rotation size (Docker log-opts max-size).", pattern=r"^[0-9]+[kmg]?$"),
            "log_max_file": i("Rotated log files kept per container.", minimum=1, maximum=100),
            "version": s("Exact runtime package version to pin (default: repository's newest).", minLength=1),
        },
    ),
    "toolkit": obj(
        "nvidia-container-toolkit.",
        {
            "version": s("Toolkit version, e.g. '1.17.8'.", pattern=VERSION),
            "cdi": b("Generate a CDI spec (/etc/cdi/nvidia.yaml) and keep it current with the driver."),
            "default_runtime": b("Make nvidia the runtime's default."),
        },
    ),
    "permissions": obj(
        "Who may use the GPUs.",
        {
            "group": s("Group that owns /dev/nvidia* (created if missing).", pattern=r"^[a-z_][a-z0-9_-]*$"),
            "mode": {"type": ["string", "integer"], "description": "Mode of /dev/nvidia* as octal, e.g. '0660'.",
                     "pattern": r"^0?[0-7]{3}$", "x-allowed": "an octal mode such as '0660'"},
            "users": {"type": "array", "description": "Users added to the group.",
                      "items": s("User name.", pattern=r"^[a-z_][a-z0-9_-]*$")},
        },
    ),
    "gpus": obj(
        "The GPUs the node is expected to have (checked by preflight and verification).",
        {
            "model": s("GPU model key: H200, H100-80GB, H100-NVL, GH200, A100-40GB, A100-80GB, A30, B200, L40S, "
                       "L4, A10, T4."),
            "count": i("Number of GPUs.", minimum=0, maximum=16),
        },
    ),
    "mig": mig,
    "vgpu": obj(
        "vGPU host settings (SR-IOV GPUs with NVIDIA's vGPU host driver).",
        {
            "type": s("vGPU type for every GPU's virtual functions, e.g. 'NVIDIA H200X-141C'."),
            "gpus": {"type": "object", "description": "vGPU type per GPU index.",
                     "propertyNames": {"pattern": "^[0-9]{1,2}$", "x-allowed": "a GPU index such as '0'"},
                     "additionalProperties": s("vGPU type name.")},
        },
    ),
    "sharing": obj(
        "GPU sharing offered by the device plugin.",
        {
            "strategy": e("none, time-slicing or mps.", ["none", "time-slicing", "mps"]),
            "replicas": i("Replicas each GPU is advertised as (time-slicing and MPS need at least 2).",
                          minimum=1, maximum=64),
            "rename_by_default": b("Advertise shared GPUs as nvidia.com/gpu.shared."),
        },
    ),
    "device_plugin": obj(
        "NVIDIA device plugin.",
        {"mig_strategy": e("How MIG devices are advertised: none, single or mixed.", ["none", "single", "mixed"])},
    ),
    "verify": obj(
        "Verification thresholds.",
        {
            "bandwidth_min_ratio": {"type": "number", "minimum": 0.1, "maximum": 1.0,
                                    "description": "Flag a GPU whose measured memory bandwidth is below this "
                                                   "fraction of the model's figure (default 0.85)."},
            "container_image": s("Image used for the container check (default: built on the node from its own "
                                 "files)."),
        },
    ),
}

settings = obj("Node settings; used in defaults, groups and nodes (node over group over defaults).", node_props)

node = obj(
    "One node.",
    {
        "name": s("Node name (also its Kubernetes node name).", pattern=NAME),
        "address": s("Address or host name the controller connects to.", minLength=1),
        "group": s("Node group whose settings this node inherits."),
        **node_props,
    },
    required=("name", "address"),
)

team = obj(
    "A team: namespace, GPU quota and access.",
    {
        "name": s("Team name.", pattern=NAME),
        "namespace": s("Namespace (default: the team name).", pattern=NAME),
        "gpus": i("Quota on requests.nvidia.com/gpu.", minimum=0),
        "mig": {"type": "object", "description": "Quota per MIG resource, by profile name.",
                "propertyNames": {"pattern": PROFILE, "x-allowed": FORMS[PROFILE]},
                "additionalProperties": {"type": "integer", "minimum": 0, "description": "Instances."}},
        "users": {"type": "array", "description": "Users bound to the team's role.", "items": s("User.")},
        "groups": {"type": "array", "description": "Groups bound to the team's role.", "items": s("Group.")},
    },
    required=("name",),
)

kubernetes = obj(
    "The Kubernetes cluster (kubeadm).",
    {
        "enabled": b("Install Kubernetes on the nodes (default true)."),
        "version": s("Kubernetes version, e.g. '1.31.4'; kubelet, kubeadm and kubectl are pinned to it.",
                     pattern=r"^1\.[0-9]{2}\.[0-9]+$"),
        "pod_cidr": s("Pod network CIDR.", pattern=CIDR),
        "service_cidr": s("Service network CIDR.", pattern=CIDR),
        "control_plane_endpoint": s("Stable address (host[:port]) of the API server; default: the first "
                                    "control plane's address."),
        "cni": e("CNI plugin.", ["flannel", "calico", "cilium"]),
        "cni_manifest": s("URL or path of the CNI manifest (override for air-gapped sites)."),
        "device_plugin_image": s("NVIDIA device plugin image."),
        "teams": {"type": "array", "description": "Teams and their GPU quotas.", "items": team},
        "monitoring": obj(
            "GPU monitoring.",
            {
                "dcgm_exporter": b("Run the DCGM exporter on GPU nodes."),
                "dcgm_exporter_image": s("DCGM exporter image."),
                "prometheus_scrape_file": s("Where to write a Prometheus scrape configuration for the exporters."),
            },
        ),
    },
)

mirrors = obj(
    "Download locations. Each can point at an internal mirror for air-gapped sites.",
    {
        "cuda": repository,
        "container_toolkit": repository,
        "docker": repository,
        "kubernetes": repository,
        "registry": s("Registry host that replaces the registry of every container image, e.g. "
                      "'registry.internal:5000'."),
        "package_proxy": s("HTTP proxy for the nodes' package manager, e.g. 'http://10.0.0.1:3142'."),
    },
)

schema = {
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
        "cluster": obj(
            "Cluster-wide settings.",
            {
                "name": s("Cluster name.", pattern=NAME),
                "kubernetes": kubernetes,
                "mirrors": mirrors,
                "ssh": ssh,
                "mig_parted_file": s("A mig-parted 'version: v1' file whose named configs nodes can use "
                                     "(mig.config), relative to this file."),
            },
            required=("name",),
        ),
        "defaults": settings,
        "groups": {"type": "object", "description": "Node groups by name; a node names its group with 'group'.",
                   "propertyNames": {"pattern": NAME, "x-allowed": FORMS[NAME]}, "additionalProperties": settings},
        "nodes": {"type": "array", "description": "The nodes.", "minItems": 1, "items": node},
    },
}

if __name__ == "__main__":
    out = ROOT / "schemas" / "cluster.v1.schema.json"
    out.write_text(json.dumps(schema, indent=2) + "\n")
    print(f"wrote {out}")

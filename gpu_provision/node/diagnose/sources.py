"""What a support archive holds: the table of files and commands read on the node, by the name each gets in the
archive. Paths and units are those the project manages; a missing file or tool is a manifest entry, not a failure."""

#: Units whose journals help: container runtime, kubelet, the driver's daemons, DCGM and the MIG boot unit.
UNITS = ("containerd", "docker", "kubelet", "nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "dcgm",
         "gpu-provision-mig")

#: Single files kept as they are on the node (under ``files/`` plus their path).
FILES = (
    "/proc/driver/nvidia/version", "/proc/driver/nvidia/params", "/proc/modules", "/proc/cmdline",
    "/etc/os-release", "/var/run/reboot-required", "/var/run/reboot-required.pkgs",
    "/etc/docker/daemon.json", "/etc/containerd/config.toml", "/etc/nvidia-container-runtime/config.toml",
    "/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml", "/var/lib/kubelet/config.yaml", "/etc/default/kubelet",
    "/etc/apt/sources.list", "/etc/nvidia-imex/nodes_config.cfg",
)

#: Folders whose files are kept too (the configs the project writes there, and the package sources).
FOLDERS = ("/etc/modprobe.d", "/etc/apt/sources.list.d", "/etc/yum.repos.d", "/etc/apt/preferences.d",
           "/etc/containerd/conf.d")

#: Folders whose listing is evidence by itself (a device plugin registers a socket in the first).
LISTINGS = ("/var/lib/kubelet/device-plugins", "/dev/nvidia-caps")

#: PCI functions as the kernel lists them (each with ``vendor``, ``device``, ``class`` and a ``driver`` link when
#: a driver is bound), and the vendor id of NVIDIA's.
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"

#: Package names worth listing (dpkg-query patterns; rpm output is filtered by the same prefixes).
PACKAGES = ("nvidia*", "libnvidia*", "cuda*", "datacenter-gpu-manager*", "containerd*", "docker*", "kube*",
            "linux-image*", "kernel*")

#: Kernel log lines about NVIDIA GPUs: Xid and SXid events, the driver's own lines, nouveau, and the kernel's refusal
#: of a module for its signature (which names no module on Debian's kernels: "Loading of unsigned module is
#: rejected").
KERNEL_PATTERN = r"NVRM|Xid|nvidia|nouveau|NVSwitch|nvlink|loading of .* is rejected"

#: Commands: archive name, argument vector, seconds allowed.
COMMANDS = (
    ("nvidia-smi/nvidia-smi.txt", ["nvidia-smi"], 60),
    ("nvidia-smi/q.xml", ["nvidia-smi", "-q", "-x"], 120),
    ("nvidia-smi/topo.txt", ["nvidia-smi", "topo", "-m"], 60),
    ("system/uname.txt", ["uname", "-a"], 10),
    ("runtime/docker-info.json", ["docker", "info", "--format", "{{json .}}"], 30),
    ("runtime/nvidia-ctk-cdi-list.txt", ["nvidia-ctk", "cdi", "list"], 30),
    ("runtime/containerd-runtimes.txt", ["containerd", "config", "dump"], 30),
)

"""Container runtime and toolkit versions, CDI spec age, driver install time, /dev/char links, installable kernel packages."""

import contextlib
import glob
import os
import re
import shutil
import stat

from . import _command
from .system import running_kernel

CDI_SPEC = "/etc/cdi/nvidia.yaml"
# Where nvidia-cdi-refresh (toolkit 1.18 and later) keeps the spec.
RUN_CDI_SPEC = "/var/run/cdi/nvidia.yaml"
DPKG_INFO = "/var/lib/dpkg/info"
DEV = "/dev"
MODULES_DIR = "/lib/modules"
# Packages whose installation or upgrade changes the driver the CDI spec describes.
DRIVER_PACKAGE_GLOBS = ("nvidia-driver", "nvidia-driver-[0-9]*", "nvidia-open", "cuda-drivers", "cuda-drivers-[0-9]*",
                        "nvidia-kernel-dkms", "nvidia-kernel-open-dkms", "nvidia-headless-no-dkms-*",
                        "linux-modules-nvidia-*", "libnvidia-compute-*")
RPM_DRIVER_PACKAGES = ("nvidia-driver", "nvidia-open", "cuda-drivers", "kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms")


def _run(argv):
    # Output of a command that succeeded, None when it failed or is absent; one that times out raises (the section
    # answers an error), so a hung tool never reads as "not installed".
    rc, text = _command.run(argv)
    if rc is None and text.startswith("timed out"):
        raise _command.TimedOut(text)
    return text if rc == 0 else None


def _version(argv, pattern):
    text = _run(argv)
    if text is None:
        return None
    match = re.search(pattern, text)
    return match.group(1) if match else None


def _mtime(path):
    """Seconds since the epoch of ``path``'s last change, None when it does not exist."""
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def _driver_installed_at():
    times = []
    for pattern in DRIVER_PACKAGE_GLOBS:
        for path in glob.glob("%s/%s.list" % (DPKG_INFO, pattern)) + glob.glob(
                "%s/%s:*.list" % (DPKG_INFO, pattern)):
            stamp = _mtime(path)
            if stamp is not None:
                times.append(stamp)
    if not times and shutil.which("rpm"):
        text = _run(["rpm", "-q", "--qf", "%{INSTALLTIME}\n"] + list(RPM_DRIVER_PACKAGES)) or ""
        times = [int(line) for line in text.split() if line.isdigit()]
    return max(times) if times else None


def _index_names(prefixes):
    """The package index's names that start with one of ``prefixes``: one ``apt-cache pkgnames`` for all of them
    (each call loads apt's whole cache)."""
    if not shutil.which("apt-cache"):
        return []
    text = _run(["apt-cache", "pkgnames"] + (list(prefixes) if len(prefixes) == 1 else [])) or ""
    return [name for name in text.split() if name.startswith(tuple(prefixes))]


def _available(names, prefix, kernels):
    """Of the index's ``names``, those named ``prefix...-KERNEL`` for one of ``kernels``."""
    suffixes = tuple("-" + k for k in kernels if k)
    return sorted(name for name in names if suffixes and name.startswith(prefix) and name.endswith(suffixes))


def _dev_char_missing():
    """NVIDIA device files without their ``/dev/char/MAJOR:MINOR`` link (nvidia-container-toolkit#48)."""
    missing = []
    for path in sorted(glob.glob(DEV + "/nvidia*") + glob.glob(DEV + "/nvidia-caps/*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISCHR(st.st_mode):
            continue
        link = "%s/char/%d:%d" % (DEV, os.major(st.st_rdev), os.minor(st.st_rdev))
        if not os.path.exists(link):
            missing.append(path)
    return missing


def collect(request):
    """Read everything (a handful of local commands); ``request`` may name ``apt_prefixes``, whose packages the
    index knows are listed under ``apt_names`` (NVIDIA's driver pinning packages)."""
    running = running_kernel()
    kernels = {running}
    with contextlib.suppress(OSError):
        kernels.update(n for n in os.listdir(MODULES_DIR) if n[:1].isdigit())
    prefixes = list((request or {}).get("apt_prefixes", []))
    names = _index_names(["linux-modules-nvidia-", "linux-headers-"] + prefixes)
    out = {
        "nvidia_ctk_version": _version(["nvidia-ctk", "--version"], r"version (\d+\.\d+\.\d+)"),
        "containerd_version": _version(["containerd", "--version"], r"\sv?(\d+\.\d+\.\d+)"),
        "docker_version": _version(["dockerd", "--version"], r"version (\d+\.\d+\.\d+)"),
        "cdi_spec_mtime": _mtime(CDI_SPEC),
        "cdi_run_spec_mtime": _mtime(RUN_CDI_SPEC),
        "driver_installed_at": _driver_installed_at(),
        # Ubuntu's signed precompiled NVIDIA modules, and header packages, for the running and installed kernels.
        "precompiled_modules": _available(names, "linux-modules-nvidia-", sorted(kernels)),
        "headers_available": _available(names, "linux-headers-", sorted(kernels)),
        "dev_char_missing": _dev_char_missing(),
    }
    if prefixes:
        out["apt_names"] = {p: sorted(n for n in names if n.startswith(p)) for p in prefixes}
    return out

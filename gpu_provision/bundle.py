"""The node package as it travels to nodes: one zip application, and the probe's one-command form.

Everything that runs on a node lives in :mod:`gpu_provision.node` (Python 3.9+, standard library only). It reaches
a node two ways, both built here from the same files:

* :func:`build` packs the whole package into one zip application installed at :data:`BUNDLE_PATH` and run as
  ``python3 BUNDLE ENTRY ARGS`` (entries ``probe``, ``verify``, ``mig-apply``; see
  :mod:`gpu_provision.node.__main__`). Beside the package it carries NVIDIA's ``pynvml`` taken from the
  ``nvidia-ml-py`` distribution installed with the product (:func:`bundled_files`), with that distribution's
  licence text: nodes need no pip install, and the tree keeps no copy of it. The MIG stage, its boot unit and the
  verify stage all use that one file. The archive is byte-for-byte reproducible (fixed timestamps, sorted entries),
  so a content comparison uploads it again only when the node code or the installed ``nvidia-ml-py`` changed.
* :func:`probe_command` carries only the modules the ``probe`` entry imports, base64 in a ``python3 -c`` loader
  that imports them from memory: reading a node's state stays one SSH command with no upload, which drift relies on.
  That full form also keeps the modules on the node under :data:`PROBE_CACHE`, by the digest of their archive
  (:mod:`gpu_provision.node.probe._cache`); once a node holds them, ``probe_command(request, cached=True)`` is a
  few hundred bytes that import them from there. When the copy is gone, the short form answers
  :data:`CACHE_MISS` and the caller sends the full form.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import shlex
import zipfile
from functools import cache
from importlib import metadata
from pathlib import Path

from gpu_provision.errors import GpuProvisionError

#: Where the node package sits inside the archives (a name of its own: it never shadows an installed gpu_provision).
PACKAGE = "gpu_provision_node"
#: The one install location of the bundle on nodes.
NODE_DIR = "/usr/local/lib/gpu-provision"
BUNDLE_NAME = "gpu-provision-node.pyz"
BUNDLE_PATH = f"{NODE_DIR}/{BUNDLE_NAME}"

#: How the probe and the verification agent's loader (:mod:`gpu_provision.verify.agent`) start the node's Python.
#: Isolated (``-I``): no ``PYTHON*`` variables, no user site, and no current
#: directory on ``sys.path``, so a ``json.py`` in the login directory cannot stand in for the standard library in a
#: program run as root. Without ``site`` (``-S``): both use the standard library only (the agent also what its
#: archive carries), and skipping site's start-up (and a distribution's ``sitecustomize``) saves about 2 ms of CPU
#: at every check of every node.
PROBE_PYTHON = "python3 -I -S"

#: Where nodes keep the probe's modules by digest (root's alone, mode 0700).
PROBE_CACHE = "/var/cache/gpu-provision/probe"
#: What the short probe command prints (and exits 0) when the node has no copy of its modules.
CACHE_MISS = {"gpu-provision-probe-cache": "miss"}

SOURCE = Path(__file__).resolve().parent / "node"
#: Third-party modules the bundle carries at its root (top-level modules, so the node code imports them by their
#: own name, from the installed distribution in a checkout and from the bundle on a node): module -> distribution.
BUNDLED = {"pynvml": "nvidia-ml-py"}
_EPOCH = (1980, 1, 1, 0, 0, 0)
_MAIN = f"import sys\nfrom {PACKAGE}.__main__ import main\nsys.exit(main())\n"

# Runs on the node's python3 (3.9+): a meta-path finder over the in-memory zip, then the probe entry.
_PROBE_LOADER = """\
import base64,importlib.abc,importlib.util,io,sys,zipfile
Z=zipfile.ZipFile(io.BytesIO(base64.b64decode('{archive}')))
N=set(Z.namelist())
class F(importlib.abc.MetaPathFinder,importlib.abc.Loader):
    def find_spec(self,name,path=None,target=None):
        p=name.replace('.','/')
        if p+'/__init__.py' in N:
            return importlib.util.spec_from_loader(name,self,origin=p+'/__init__.py',is_package=True)
        if p+'.py' in N:
            return importlib.util.spec_from_loader(name,self,origin=p+'.py')
    def create_module(self,spec):
        return None
    def exec_module(self,module):
        o=module.__spec__.origin
        exec(compile(Z.read(o),'<probe>/'+o,'exec'),module.__dict__)
sys.meta_path.insert(0,F())
{store}from {package}.probe import main
sys.exit(main(sys.argv[1:]))
"""

# The same entry from the node's copy, when the cache directory is still root's alone and the copy is complete.
_CACHED_LOADER = """import sys
from os import lstat
R='{cache}'
D=R+'/{digest}'
try:
    s=lstat(R);ok=s.st_uid==0 and s.st_mode&0o170077==0o040000 and lstat(D+'/{package}/probe/__init__.py')
except OSError:
    ok=0
if not ok:
    print({miss!r});sys.exit(0)
sys.path.insert(0,D)
from {package}.probe import main
sys.exit(main(sys.argv[1:]))
"""


def node_files() -> list[tuple[str, bytes]]:
    """Every file the node package ships (``.py`` files and licences), by path inside the package, sorted."""
    found = []
    for path in sorted(SOURCE.rglob("*")):
        relative = path.relative_to(SOURCE).as_posix()
        if path.is_file() and "__pycache__" not in relative and (path.suffix == ".py" or path.name.startswith("LICENSE")):
            found.append((relative, path.read_bytes()))
    return found


def _licence_text(dist: metadata.Distribution, source: bytes) -> bytes:
    """The distribution's licence files, or where it ships none (nvidia-ml-py's wheels carry none) the licence
    notice that opens its module: the leading ``#`` comment block."""
    texts = []
    for name in dist.metadata.get_all("License-File") or []:
        for candidate in (f"licenses/{name}", name):
            located = next((f for f in dist.files or [] if f.as_posix().endswith(f".dist-info/{candidate}")), None)
            if located is not None:
                texts.append(Path(str(dist.locate_file(located))).read_text())
                break
    if not texts:
        lines = []
        for line in source.decode().splitlines():
            if not line.startswith("#"):
                break
            lines.append(line.lstrip("#").removeprefix(" "))
        texts.append("\n".join(lines).strip("\n") + "\n")
    meta = dist.metadata
    head = (f"{meta['Name']} {dist.version} ({meta['Author'] or 'its authors'}), "
            f"licence: {meta['License'] or 'see below'}. Shipped unchanged in this bundle.\n\n")
    return (head + "\n".join(texts)).encode()


@cache
def bundled_files() -> list[tuple[str, bytes]]:
    """Each module of :data:`BUNDLED` read from its installed distribution, and that distribution's licence.

    Read at build time through ``importlib.metadata`` (the distribution's own file list, so a same-named module
    from another distribution is never taken); a missing distribution is one error naming it.
    """
    found = []
    for module, distribution in sorted(BUNDLED.items()):
        try:
            dist = metadata.distribution(distribution)
        except metadata.PackageNotFoundError:
            raise GpuProvisionError(f"the node bundle carries {module} from the {distribution} distribution, which "
                                    f"is not installed: pip install {distribution}") from None
        located = next((f for f in dist.files or [] if f.as_posix() == f"{module}.py"), None)
        if located is None:
            raise GpuProvisionError(f"the installed {distribution} {dist.version} has no {module}.py")
        source = Path(str(dist.locate_file(located))).read_bytes()
        found += [(f"{module}.py", source), (f"LICENSE.{distribution}", _licence_text(dist, source))]
    return sorted(found)


def _zip(entries: list[tuple[str, bytes]], prefix: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    buffer.write(prefix)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


@cache
def build() -> bytes:
    """The node package as a reproducible zip application: ``python3 gpu-provision-node.pyz ENTRY ARGS``.

    Built once per process: every host of a run gets the same bytes. Entries: ``__main__.py``, then sorted by
    name, the bundled third-party modules with their licences and the node package.
    """
    entries = [("__main__.py", _MAIN.encode())]
    entries += sorted(bundled_files() + [(f"{PACKAGE}/{name}", data) for name, data in node_files()])
    return _zip(entries, prefix=b"#!/usr/bin/env python3\n")


def write(path: str) -> str:
    """Write the zip application to ``path`` (mode 0755) and return the path."""
    with open(path, "wb") as handle:
        handle.write(build())
    os.chmod(path, 0o755)
    return path


def command(entry: str, *args: str, bundle: str = BUNDLE_PATH) -> str:
    """The shell command that runs ``entry`` of the installed bundle with ``args``."""
    return " ".join(shlex.quote(a) for a in ("python3", bundle, entry, *args))


def _module_path(name: str, files: dict[str, bytes]) -> str | None:
    base = name.replace(".", "/")
    return next((p for p in (f"{base}/__init__.py", f"{base}.py") if p in files), None)


def _relative_imports(path: str, source: bytes) -> set[str]:
    """Package-relative module names (``probe.mig``) that the module at ``path`` imports relatively."""
    package = path.rsplit("/", 1)[0].split("/") if "/" in path else []
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package[: len(package) - node.level + 1]
        stem = [*base, *(node.module.split(".") if node.module else [])]
        found.add(".".join(stem))
        found.update(".".join([*stem, alias.name]) for alias in node.names)
    return found


def entry_files(package: str) -> list[tuple[str, bytes]]:
    """The files an entry needs and nothing more: every module of ``package`` (``probe``), the modules they
    import relatively, and the ``__init__.py`` of each package on the way."""
    files = dict(node_files())
    queue = [p[:-3].replace("/", ".") for p in files if p.startswith(package + "/") and p.endswith(".py")]
    wanted = {"__init__.py"}
    while queue:
        name = queue.pop()
        path = _module_path(name, files)
        if path is None or path in wanted:
            continue
        wanted.add(path)
        parts = name.split(".")
        queue += [".".join(parts[:i]) for i in range(1, len(parts))]
        queue += sorted(_relative_imports(path, files[path]))
    return [(p, files[p]) for p in sorted(wanted)]


@cache
def _probe_archive() -> bytes:
    return _zip([(f"{PACKAGE}/{name}", data) for name, data in entry_files("probe")])


@cache
def probe_digest() -> str:
    """The digest naming this version of the probe's modules on nodes (of their archive's bytes)."""
    return hashlib.sha256(_probe_archive()).hexdigest()[:32]


#: The lines of the full probe loader that keep the modules on the node (left out when nothing may be written).
_STORE = "from {package}.probe._cache import store\nstore(Z,'{cache}','{digest}')\n"


@cache
def _probe_loader(cached: bool, keep: bool = True) -> str:
    if cached:
        return _CACHED_LOADER.format(cache=PROBE_CACHE, digest=probe_digest(), package=PACKAGE,
                                     miss=json.dumps(CACHE_MISS))
    store = _STORE.format(package=PACKAGE, cache=PROBE_CACHE, digest=probe_digest()) if keep else ""
    return _PROBE_LOADER.format(archive=base64.b64encode(_probe_archive()).decode(), package=PACKAGE, store=store)


def probe_argv(request: dict, cached: bool = False, keep: bool = True) -> list[str]:
    """The probe's argv for ``request`` (section name -> that section's arguments): :data:`PROBE_PYTHON`'s words,
    ``-c``, the loader, then the request as JSON.

    The full form (default) carries the probe's modules and keeps a copy on the node; ``cached`` gives the short
    form that runs that copy, or prints :data:`CACHE_MISS` where there is none. Either is one command.
    ``keep=False`` gives a full form that writes nothing on the node (the read-only conformance suite's probe).
    """
    return [*PROBE_PYTHON.split(), "-c", _probe_loader(cached, keep), json.dumps(request, sort_keys=True)]


def probe_command(request: dict, cached: bool = False, keep: bool = True) -> str:
    """:func:`probe_argv` as one shell command."""
    return " ".join(shlex.quote(word) for word in probe_argv(request, cached, keep))

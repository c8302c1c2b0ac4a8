"""Load a cluster file into the typed model, or fail with every problem it has.

Order: YAML (with positions, hostile-input limits) -> JSON Schema -> inheritance -> typed model -> checks of meaning
(:mod:`gpu_provision.spec.semantics`) -> derived values (:func:`gpu_provision.spec.resolve.derive`) ->
:class:`~gpu_provision.spec.model.Cluster`. A setting the file leaves out takes the model's default, which comes from
:mod:`gpu_provision.spec.settings`. Nothing here touches a node.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path as FsPath
from typing import Any, cast

from gpu_provision.errors import GpuProvisionError, SpecError, SpecProblem
from gpu_provision.node.mig import migparted as node_migparted
from gpu_provision.spec import catalog, migparted, nodepaths, yamlsafe
from gpu_provision.spec.context import Context
from gpu_provision.spec.model import (
    Cluster,
    ContainerRuntime,
    DevicePlugin,
    Drain,
    Driver,
    GpuExpectation,
    InClusterVerification,
    Kubernetes,
    Mig,
    MigLayout,
    Mirrors,
    Monitoring,
    Node,
    Packages,
    Permissions,
    PodDeletion,
    Preflight,
    Repository,
    Rollout,
    Sharing,
    SshSettings,
    Team,
    Toolkit,
    Verify,
    WaitForJobs,
)
from gpu_provision.spec.resolve import Inherited, derive, resolve_node
from gpu_provision.spec.schema import in_file_order, validate
from gpu_provision.spec.semantics import check
from gpu_provision.spec.settings import default
from gpu_provision.spec.yamlsafe import Path, Positions, format_path, load_yaml, read_bounded


def _repository(ctx: Context, raw: dict[str, Any] | None, name: str) -> Repository:
    # A mirror given in the file replaces the upstream repository key by key (its suite and components included);
    # a key_file replaces the upstream key URL too.
    upstream = dict(default(f"cluster.mirrors.{name}"))
    if raw and "key_file" in raw:
        upstream.pop("key_url", None)
    data: dict[str, Any] = {**upstream, **(raw or {})}
    settings: dict[str, Any] = {k: tuple(v) if k == "components" else v for k, v in data.items()}
    if "key_file" in settings:
        settings["key_file"] = _path(ctx, settings["key_file"])
    return Repository(**settings)


def _mode(value: Any) -> str:
    # YAML 1.1 reads an unquoted 0660 as the octal integer 432; only values that fit in 0o777 can be that.
    if isinstance(value, (int, float)):
        return f"{int(value):04o}"
    return value if value.startswith("0") else "0" + value


def _driver(raw: dict[str, Any]) -> Driver:
    settings = dict(raw)
    if "branch" in settings:
        settings["branch"] = _text(settings["branch"])
    elif "version" in settings:
        # An exact version names its own branch; the default branch would only mislead a reader of the plan.
        settings["branch"] = None
    if "cuda_min" in settings:
        settings["cuda_min"] = str(settings["cuda_min"])
    return Driver(**settings)


def _permissions(raw: dict[str, Any]) -> Permissions:
    settings: dict[str, Any] = {k: _mode(v) if k == "mode" else tuple(v or ()) if k == "users" else v
                                for k, v in raw.items()}
    return Permissions(**settings)


def _layouts(ctx: Context, index: int, raw: dict[str, Any], model: catalog.GpuModel | None, count: int) -> Mig:
    mig = raw.get("mig") or {}
    layouts: dict[int, MigLayout] = {}

    def one(settings: dict[str, Any], rel: Path) -> dict[int, MigLayout] | MigLayout | None:
        if "config" in settings:
            if ctx.mig_parted is None:
                ctx.add_node(index, (*rel, "config"), f"{format_path(rel)[2:]}.config names a mig-parted config, but "
                                                      "cluster.mig_parted_file is not set")
                return None
            configs = ctx.mig_parted.get("mig-configs", {})
            if settings["config"] not in configs:
                ctx.add_node(index, (*rel, "config"), f"'{settings['config']}' is not a config of the mig-parted file "
                                                      f"(allowed: {', '.join(configs)})")
                return None
            if model is None:
                return None
            return migparted.layouts_for(ctx.mig_parted, settings["config"], model, count)
        if "layout" in settings:
            return MigLayout(profiles=dict(settings["layout"]), enabled=settings.get("enabled", True))
        if "enabled" in settings:
            return MigLayout(profiles={}, enabled=settings["enabled"])
        return None

    if "layout" in mig and "config" in mig:
        ctx.add_node(index, ("mig", "config"), "give either mig.layout or mig.config, not both")
    node_wide = one(mig, ("mig",))
    if isinstance(node_wide, dict):
        layouts.update(node_wide)
    elif node_wide is not None:
        layouts.update({i: node_wide for i in range(count)})
    for key, settings in (mig.get("gpus") or {}).items():
        gpu = int(key)
        if "layout" in settings and "config" in settings:
            ctx.add_node(index, ("mig", "gpus", key, "config"),
                         f"give either mig.gpus.{key}.layout or mig.gpus.{key}.config, not both")
        if gpu >= count:
            ctx.add_node(index, ("mig", "gpus", key), f"GPU index {gpu} does not exist: the node has {count} GPU(s) "
                                                      f"(allowed: 0..{max(count - 1, 0)})")
            continue
        per_gpu = one(settings, ("mig", "gpus", key))
        if isinstance(per_gpu, dict):
            if gpu in per_gpu:
                layouts[gpu] = per_gpu[gpu]
        elif per_gpu is not None:
            layouts[gpu] = per_gpu
    return Mig(layouts=layouts, allow_drain=bool(mig.get("allow_drain", default("mig.allow_drain"))),
               allow_module_unload=bool(mig.get("allow_module_unload", default("mig.allow_module_unload"))))


#: The settings of a resolved node that make up its :class:`Node` beside its name, address and line.
_SHAPE = ("role", "group", "labels", "taints", "ssh", "packages", "driver", "container_runtime", "toolkit",
          "permissions", "gpus", "mig", "vgpu", "sharing", "device_plugin", "preflight", "verify")


def _node(ctx: Context, index: int, raw: dict[str, Any], cluster_ssh: SshSettings) -> Node:
    """The node's :class:`Node`; one whose every setting is the same object as an earlier node's (the nodes of a
    group share their inherited mappings) is that node's with its own name, address and line, when building that
    one found no problem (a problem is recorded at its own node's lines)."""
    values = [raw.get(key) for key in _SHAPE]
    shape = ("node", *[id(v) if v.__class__ is dict or v.__class__ is list else v for v in values])
    line = ctx.positions.of(("nodes", index))[0]
    found = ctx.parts.get(shape)
    if found is not None:
        original, node = found[1]
        ctx.copies[index] = original
        return node.changed(name=raw["name"], address=raw["address"], line=line)
    problems = len(ctx.problems)
    node = _build_node(ctx, index, raw, cluster_ssh, line)
    if len(ctx.problems) == problems:
        ctx.parts[shape] = (values, (index, node))  # holding the mappings keeps their ids from being reused
    return node


def _build_node(ctx: Context, index: int, raw: dict[str, Any], cluster_ssh: SshSettings, line: int) -> Node:
    gpus = raw.get("gpus") or {}
    model = catalog.model(gpus["model"]) if gpus.get("model") else None
    count = int(gpus.get("count", default("gpus.count")))
    ssh = raw.get("ssh") or {}
    vgpu = raw.get("vgpu") or {}
    vgpu_types: dict[int, str] = {}
    if "type" in vgpu:
        vgpu_types.update({i: vgpu["type"] for i in range(count)})
    vgpu_types.update({int(k): v for k, v in (vgpu.get("gpus") or {}).items()})
    part = ctx.part
    return Node(
        name=raw["name"],
        address=raw["address"],
        role=raw.get("role", default("role")),
        group=raw.get("group"),
        labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        taints=tuple(raw.get("taints") or ()),
        ssh=part("ssh", raw.get("ssh"), lambda _: replace(cluster_ssh, **cast(dict[str, Any], {
            k: _path(ctx, v) if k == "key" else v for k, v in ssh.items()}))),
        packages=part("packages", raw.get("packages"), lambda r: Packages(**(r or {}))),
        driver=part("driver", raw.get("driver"), lambda r: _driver(r or {})),
        container_runtime=part("container_runtime", raw.get("container_runtime"),
                               lambda r: ContainerRuntime(**(r or {}))),
        toolkit=part("toolkit", raw.get("toolkit"), lambda r: Toolkit(**(r or {}))),
        permissions=part("permissions", raw.get("permissions"), lambda r: _permissions(r or {})),
        gpus=GpuExpectation(model=model.key if model else gpus.get("model"), count=count),
        mig=_mig(ctx, index, raw, model, count),
        vgpu=vgpu_types,
        sharing=part("sharing", raw.get("sharing"), lambda r: Sharing(**(r or {}))),
        device_plugin=part("device_plugin", raw.get("device_plugin"), lambda r: DevicePlugin(**(r or {}))),
        preflight=part("preflight", raw.get("preflight"),
                       lambda r: Preflight(ignore=tuple((r or {}).get("ignore") or ()))),
        verify=part("verify", raw.get("verify"), lambda r: Verify(**(r or {}))),
        line=line,
    )


def _mig(ctx: Context, index: int, raw: dict[str, Any], model: catalog.GpuModel | None, count: int) -> Mig:
    """The node's MIG settings, built once per mapping, model and GPU count when building them found no problem
    (a problem is recorded at this node's lines, so a node that has one builds its own)."""
    key = ("mig", id(raw.get("mig")), model.key if model else None, count)
    found = ctx.parts.get(key)
    if found is not None:
        return cast(Mig, found[1])
    problems = len(ctx.problems)
    mig = _layouts(ctx, index, raw, model, count)
    if len(ctx.problems) == problems:
        ctx.parts[key] = (raw.get("mig"), mig)
    return mig


def _text(value: Any) -> str:
    # JSON Schema counts 580.0 as an integer; keep "580", not "580.0".
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _path(ctx: Context, value: str | None) -> str | None:
    if value is None:
        return None
    # Normalised with symbolic links resolved: the path checked against the allowed directories is the one read.
    expanded = FsPath(os.path.expanduser(value))
    return os.path.realpath(expanded if expanded.is_absolute() else (ctx.base_dir / expanded))


def _kubernetes(raw: dict[str, Any]) -> Kubernetes:
    teams = tuple(
        Team(**{**t, "namespace": t.get("namespace", t["name"]), "mig": dict(t.get("mig") or {}),
                "users": tuple(t.get("users") or ()), "groups": tuple(t.get("groups") or ()),
                "service_accounts": tuple(t.get("service_accounts") or ())})
        for t in raw.get("teams") or ()
    )
    settings = {k: v for k, v in raw.items() if k not in ("teams", "monitoring", "verification")}
    verification = dict(raw.get("verification") or {})
    if "tolerations" in verification:
        verification["tolerations"] = tuple(verification["tolerations"])
    return Kubernetes(**settings, teams=teams, monitoring=Monitoring(**(raw.get("monitoring") or {})),
                      verification=InClusterVerification(**verification))


def _rollout(raw: dict[str, Any]) -> Rollout:
    settings = {k: v for k, v in raw.items() if k not in ("wait_for_jobs", "pod_deletion", "drain")}
    return Rollout(**settings, wait_for_jobs=WaitForJobs(**(raw.get("wait_for_jobs") or {})),
                   pod_deletion=PodDeletion(**(raw.get("pod_deletion") or {})),
                   drain=Drain(**(raw.get("drain") or {})))


def _load_mig_parted(ctx: Context) -> None:
    name = ctx.document["cluster"].get("mig_parted_file")
    if not name:
        return
    where = ("cluster", "mig_parted_file")
    path = ctx.base_dir / name
    try:
        data = read_bounded(path, "mig-parted file")
    except OSError as exc:
        ctx.add(where, f"cannot read mig-parted file {path}: {exc.strerror}")
        return
    except SpecError as exc:
        ctx.add(where, f"{exc.problems[0].message}: {path}")
        return
    outside = nodepaths.outside_problem(str(path), ctx.base_dir, _allowed_dirs(ctx))
    if outside:
        ctx.add(where, outside)
        return
    try:
        doc, _ = load_yaml(data, str(path), fast=ctx.fast)
    except SpecError as exc:
        ctx.problems.extend(exc.problems)
        return
    problems = node_migparted.check(doc)
    for sub, message in problems:
        ctx.add(where, f"{path}: {format_path(sub)}: {message}")
    if not problems:
        ctx.mig_parted = doc


def _allowed_dirs(ctx: Context) -> list[str]:
    """The directories a controller file may come from besides the cluster file's (``cluster.controller_dirs``)."""
    return [_path(ctx, d) or "" for d in ctx.document["cluster"].get("controller_dirs") or ()]


def _not_mig_parted(document: Any, positions: Positions, filename: str) -> None:
    """Refuse a mig-parted file given as the cluster file with one message saying where it belongs.

    Its ``version: v1`` matches ours, so the schema alone would list every key as unknown without saying why.
    """
    if not isinstance(document, dict) or "mig-configs" not in document or "nodes" in document:
        return
    line, col = positions.of(("mig-configs",), key=True)
    raise SpecError([SpecProblem(filename, line, col, format_path(()),
                                 "this is a mig-parted file, not a cluster file: name it in the cluster file as "
                                 "cluster.mig_parted_file and pick one of its configs with mig.config on a node "
                                 "(see docs/cluster-file.md)")])


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Load, validate and resolve the cluster file at ``path``.

    Raises :class:`SpecError` listing every problem (in file order) or :class:`GpuProvisionError` when the
    file cannot be read. The YAML is composed by libyaml where PyYAML has it (a 10,000-node file validates in about
    half the time); a file with any problem is loaded again by PyYAML's own composer, whose positions and wording
    every message then carries.
    """
    filename = str(path)
    try:
        data = read_bounded(path, "cluster file")
    except OSError as exc:
        raise GpuProvisionError(f"{filename}: cannot read cluster file: {exc.strerror}") from None
    if yamlsafe.FAST_LOADER is None:
        return _load(data, filename, fast=False)
    try:
        return _load(data, filename, fast=True)
    except SpecError:
        # libyaml composed it; PyYAML locates and words every problem, so a refused file reads the same either way.
        return _load(data, filename, fast=False)


def _load(data: bytes, filename: str, *, fast: bool) -> Cluster:
    """:func:`load_cluster` on the file's bytes, its YAML composed by libyaml when ``fast``."""
    document, positions = load_yaml(data, filename, fast=fast)
    _not_mig_parted(document, positions, filename)
    problems = validate(document, positions, filename)
    if problems:
        raise SpecError(problems)
    ctx = Context(document=document, positions=positions, filename=filename, base_dir=FsPath(filename).resolve().parent,
                  fast=fast)
    _load_mig_parted(ctx)

    cluster_raw = document["cluster"]
    ssh_raw = dict(cluster_raw.get("ssh") or {})
    for key in ("key", "known_hosts"):
        if key in ssh_raw:
            ssh_raw[key] = _path(ctx, ssh_raw[key])
    cluster_ssh = SshSettings(**ssh_raw)
    nodes = []
    inherited: Inherited = {}
    for index in range(len(document["nodes"])):
        raw, provenance = resolve_node(document, index, inherited)
        ctx.provenance[index] = provenance
        nodes.append(_node(ctx, index, raw, cluster_ssh))
    mirrors_raw = cluster_raw.get("mirrors") or {}
    cluster = Cluster(
        name=cluster_raw["name"],
        source=filename,
        kubernetes=_kubernetes(cluster_raw.get("kubernetes") or {}),
        mirrors=Mirrors(
            cuda=_repository(ctx, mirrors_raw.get("cuda"), "cuda"),
            container_toolkit=_repository(ctx, mirrors_raw.get("container_toolkit"), "container_toolkit"),
            docker=_repository(ctx, mirrors_raw.get("docker"), "docker"),
            kubernetes=_repository(ctx, mirrors_raw.get("kubernetes"), "kubernetes"),
            registry=mirrors_raw.get("registry"),
            package_proxy=mirrors_raw.get("package_proxy"),
        ),
        ssh=cluster_ssh,
        nodes=tuple(nodes),
        mig_parted_file=cluster_raw.get("mig_parted_file"),
        rollout=_rollout(cluster_raw.get("rollout") or {}),
        controller_dirs=tuple(_allowed_dirs(ctx)),
    )
    check(cluster, ctx)
    if ctx.problems:
        raise SpecError(in_file_order(ctx.problems, filename))
    return derive(cluster)

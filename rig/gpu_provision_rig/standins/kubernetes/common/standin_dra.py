"""Stand-in for the test rig: Dynamic Resource Allocation as NVIDIA's DRA driver and Kubernetes' control plane do it.

Two parts, both run by the stand-in kubelet (``/usr/bin/kubelet``):

- **The driver's kubelet plugin** (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1, ``cmd/gpu-kubelet-plugin``):
  while the DaemonSet ``kube-system/dra-driver-nvidia-gpu-kubelet-plugin`` exists and its ``nodeSelector``
  selects the node, the node's kubelet publishes one ResourceSlice for it (``driver.go``: one pool named after the
  node, one slice), named as the resourceslice controller's ``GenerateName`` makes it (``<index hex>-<driver>-
  <owner>-`` and 5 characters; ``vendor/k8s.io/dynamic-resource-allocation/resourceslice/
  resourceslicecontroller.go``), owned by the Node, generation 1, updated in place when the devices change (one
  update call keeps the generation, as that controller does). Devices come from ``nvidia-smi`` (the plugin reads
  NVML): a whole GPU ``gpu-<minor>`` where MIG is off, else one ``gpu-<minor>-mig-<profile>-<profile id>-
  <placement start>`` per MIG device (``deviceinfo.go``, ``mig.go``: ``ToCanonicalName``, ``CommonAttributesMig``,
  ``CommonCapacitiesMig``), with the driver's attribute names and value kinds (versions as Masterminds semver
  prints them: ``580.95.05`` is ``580.95.5``). The slice is deleted once the DaemonSet no longer selects the node,
  as the kubelet removes a plugin's slices when it unregisters.
- **The control plane's DRA parts** (Kubernetes 1.34+, ``resource.k8s.io/v1``): the resourceclaim controller
  makes a pod's ResourceClaim from its ``resourceClaimTemplateName`` (``<pod>-<claim>-<5 characters>``, owned by the
  pod, annotated ``resource.kubernetes.io/pod-claim-name``) and records it in the pod's
  ``status.resourceClaimStatuses``; a claim whose pod is gone is deleted, a finished pod leaves ``reservedFor``, and
  a claim reserved for nobody is deallocated. The scheduler's DynamicResources filter runs after NodeResourcesFit:
  each request (``exactly``: a DeviceClass, ``ExactCount`` with ``count`` or ``All``) takes devices of the node's
  slices that the class's selectors and the request's select and no other claim holds, else the node's reason is
  ``cannot allocate all claims``; binding writes ``status.allocation`` (the results and a node selector on the
  node's name) and ``reservedFor``. The kubelet starts a claim's pod only once every claim is allocated and
  reserved for it, under ``gpu-sim hold`` on the first allocated device's GPU.

What they cannot prove: selectors are read, not run as CEL (only conjunctions of ``device.driver == '...'`` and
``device.attributes['<domain>'].<name> == '...'``, the forms this project's DeviceClasses use; any other selects
nothing), no ``firstAvailable`` requests, admin access, device taints, partitionable devices or consumable
capacity, no extended resources served through a DeviceClass's ``extendedResourceName``, no CDI: the pod's process
gets no device nodes, and no quota is enforced on claims.
"""

import os
import re
import subprocess
import xml.etree.ElementTree as ElementTree

import standin_api as api

DRIVER = "gpu.nvidia.com"
API = "resource.k8s.io/v1"
PLUGIN = ("DaemonSet", "kube-system", "dra-driver-nvidia-gpu-kubelet-plugin")
#: The annotation the resourceclaim controller puts on a claim it made for a pod (the pod's claim entry's name).
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
#: Kubernetes' standard attribute for a device's PCI address (k8s.io/dynamic-resource-allocation/deviceattribute).
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
#: The scheduler's DynamicResources filter, when no allocation of the pod's claims fits the node.
CANNOT_ALLOCATE = "cannot allocate all claims"
#: nvidia-smi's product brand -> go-nvlib's ``GetBrandAsString`` (NVML's brand enum); a real H200 reports brand 14,
#: NVML_BRAND_NVIDIA, printed "NVIDIA" by nvidia-smi (tests/fixtures/h200).
BRANDS = {"NVIDIA": "Nvidia", "Tesla": "Tesla", "Quadro": "Quadro", "GeForce": "GeForce", "Titan": "Titan",
          "NVIDIA RTX": "NvidiaRTX", "Quadro RTX": "QuadroRTX", "GeForce RTX": "GeForceRTX", "TITAN RTX": "TitanRTX"}
_LGI = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")
_MIG_UUID = re.compile(r"^\s+MIG \S+\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")
_SELECT_DRIVER = re.compile(r"^device\.driver == '([^']*)'$")
_SELECT_ATTRIBUTE = re.compile(r"^device\.attributes\['([^']+)'\]\.([A-Za-z0-9]+) == '([^']*)'$")


# -- the kubelet plugin: the node's devices and its ResourceSlice


def semver(text):
    """A version as Masterminds semver's ``MustParse(...).String()`` prints it: ``580.95.05`` -> ``580.95.5``,
    ``9.0`` -> ``9.0.0``."""
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    return ".".join(str(p) for p in parts + [0] * (3 - len(parts)))


def quantity(value):
    """An integer as Kubernetes writes a binary-SI quantity: the largest exact ``Ki``..``Ei`` suffix, else plain."""
    for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        if value and value % (1024 ** power) == 0:
            return "%d%s" % (value // 1024 ** power, suffix)
    return str(value)


def _smi(*args):
    return subprocess.run(["nvidia-smi", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True, check=False, timeout=30).stdout


def _text(node, path, default=""):
    found = node.find(path)
    return (found.text or "").strip() if found is not None and found.text else default


def _mib(text):
    return int(text.split()[0]) * 1024 * 1024 if text and text.split()[0].isdigit() else 0


def read_devices(run=_smi):
    """The devices the plugin would publish for this node, from ``nvidia-smi`` (``run(*args)`` -> its stdout);
    [] where there is no driver."""
    try:
        root = ElementTree.fromstring(run("-q", "-x"))
    except (ElementTree.ParseError, OSError, subprocess.TimeoutExpired):
        return []
    caps = {}
    for line in run("--query-gpu=index,compute_cap", "--format=csv,noheader").splitlines():
        index, _, cap = line.partition(",")
        if index.strip().isdigit():
            caps[int(index)] = cap.strip()
    instances = {}  # (gpu index, GI id) -> (profile, profile id, placement start, size)
    for line in run("mig", "-lgi").splitlines():
        match = _LGI.match(line)
        if match:
            gpu, profile, profile_id, gi, start, size = match.groups()
            instances[(int(gpu), int(gi))] = (profile, int(profile_id), int(start), int(size))
    mig_uuids, gpu_index = {}, -1
    for line in run("-L").splitlines():
        if line.startswith("GPU "):
            gpu_index = int(line.split()[1].rstrip(":"))
        elif _MIG_UUID.match(line):
            number, uuid = _MIG_UUID.match(line).groups()
            mig_uuids[(gpu_index, int(number))] = uuid
    driver, cuda = _text(root, "driver_version"), _text(root, "cuda_version")
    devices = []
    for index, gpu in enumerate(root.findall("gpu")):
        bus = _text(gpu, "pci/pci_bus_id").lower()
        if re.match(r"^0000[0-9a-f]{4}:", bus):
            bus = bus[4:]  # go-nvlib's GetPCIBusID trims the 8-digit domain's leading zeros
        common = {
            "productName": {"string": _text(gpu, "product_name")},
            "brand": {"string": BRANDS.get(_text(gpu, "product_brand"), _text(gpu, "product_brand"))},
            "architecture": {"string": _text(gpu, "product_architecture")},
            "cudaComputeCapability": {"version": semver(caps.get(index, "0.0"))},
            "driverVersion": {"version": semver(driver)},
            "cudaDriverVersion": {"version": semver(cuda)},
            PCI_BUS_ID: {"string": bus},
        }
        minor, uuid = int(_text(gpu, "minor_number", str(index))), _text(gpu, "uuid")
        migs = gpu.findall("mig_devices/mig_device")
        if _text(gpu, "mig_mode/current_mig") != "Enabled":
            devices.append({"name": "gpu-%d" % minor,
                            "attributes": dict(common, type={"string": "gpu"}, uuid={"string": uuid}),
                            "capacity": {"memory": {"value": quantity(_mib(_text(gpu, "fb_memory_usage/total")))}}})
            continue
        for mig in migs:
            number, gi = int(_text(mig, "index")), int(_text(mig, "gpu_instance_id"))
            if (index, gi) not in instances:
                continue
            profile, profile_id, start, size = instances[(index, gi)]
            shared = "device_attributes/shared/"
            capacity = {name: {"value": _text(mig, shared + field, "0")} for name, field in (
                ("multiprocessors", "multiprocessor_count"), ("copyEngines", "copy_engine_count"),
                ("decoders", "decoder_count"), ("encoders", "encoder_count"), ("jpegEngines", "jpg_count"),
                ("ofaEngines", "ofa_count"))}
            capacity["memory"] = {"value": quantity(_mib(_text(mig, "fb_memory_usage/total")))}
            for slot in range(start, start + size):
                capacity["memorySlice%d" % slot] = {"value": "1"}
            attributes = dict(common, type={"string": "mig"}, parentUUID={"string": uuid},
                              profile={"string": profile}, uuid={"string": mig_uuids.get((index, number), "")})
            devices.append({"name": canonical_mig_name(minor, profile, profile_id, start),
                            "attributes": attributes, "capacity": capacity})
    return devices


def canonical_mig_name(minor, profile, profile_id, start):
    """``MigSpecTuple.ToCanonicalName``: ``gpu-0-mig-1g18gb-19-0`` for a 1g.18gb (profile 19) at placement 0."""
    name = re.sub(r"[^a-z0-9-.]", "-", profile.replace(".", "").lower()).strip("-").rstrip(".")
    return "gpu-%d-mig-%s-%d-%d" % (minor, name, profile_id, start)


def plugin_selects(items, labels):
    """Whether the driver's kubelet plugin DaemonSet exists and its ``nodeSelector`` selects these node labels."""
    plugin = api.find(items, PLUGIN[0], PLUGIN[2], PLUGIN[1])
    if plugin is None:
        return False
    selector = ((plugin.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector") or {}
    return all((labels or {}).get(k) == v for k, v in selector.items())


def node_slices(items, node_name):
    return [o for o in items if o.get("kind") == "ResourceSlice"
            and (o.get("spec") or {}).get("driver") == DRIVER and (o.get("spec") or {}).get("nodeName") == node_name]


def desired_slice(node, devices, current, suffix):
    """The node's one ResourceSlice: ``current`` (its name and generation kept) with these devices, else a new one
    named ``0-gpu.nvidia.com-<node>-<suffix>``."""
    meta = node["metadata"]
    if current is not None:
        name, generation = current["metadata"]["name"], (current["spec"].get("pool") or {}).get("generation", 1)
    else:
        name, generation = "0-%s-%s-%s" % (DRIVER, meta["name"], suffix), 1
    return {"apiVersion": API, "kind": "ResourceSlice",
            "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                                                            "uid": meta.get("uid"), "controller": True}]},
            "spec": {"driver": DRIVER, "nodeName": meta["name"],
                     "pool": {"name": meta["name"], "generation": generation, "resourceSliceCount": 1},
                     "devices": devices}}


# -- the control plane: claims from templates, allocation at scheduling


def _pod_claims(pod):
    return (pod.get("spec") or {}).get("resourceClaims") or []


def wants_claims(pod):
    return bool(_pod_claims(pod))


def claim_for(items, pod, entry):
    """The ResourceClaim a pod's ``spec.resourceClaims`` entry names: the one made for it from its template (owned
    by the pod, annotated with the entry's name), or the claim it names directly; None while there is none."""
    meta = pod["metadata"]
    namespace = meta.get("namespace", "default")
    if entry.get("resourceClaimName"):
        return api.find(items, "ResourceClaim", entry["resourceClaimName"], namespace)
    for claim in items:
        cmeta = claim.get("metadata") or {}
        if claim.get("kind") == "ResourceClaim" and cmeta.get("namespace") == namespace and \
                (cmeta.get("annotations") or {}).get(POD_CLAIM_NAME) == entry.get("name") and \
                any(r.get("uid") == meta.get("uid") for r in cmeta.get("ownerReferences") or []):
            return claim
    return None


def pod_done(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def claims_controller(items):
    """The resourceclaim controller: claims from templates for pods that need them, ``resourceClaimStatuses`` on
    the pod, ``reservedFor`` pruned of pods gone or finished, deallocation of claims reserved for nobody, and
    deletion of claims made for pods that are gone. Whether anything changed."""
    changed = False
    pods = {(p.get("metadata") or {}).get("uid"): p for p in items if p.get("kind") == "Pod"}
    for pod in list(pods.values()):
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") or pod_done(pod) or not _pod_claims(pod):
            continue
        statuses = []
        for entry in _pod_claims(pod):
            claim = claim_for(items, pod, entry)
            template = api.find(items, "ResourceClaimTemplate", entry.get("resourceClaimTemplateName") or "",
                            meta.get("namespace", "default"))
            if claim is None and template is not None:
                base = ("%s-%s-" % (meta["name"], entry.get("name")))[:58]
                tmeta = (template.get("spec") or {}).get("metadata") or {}
                claim = api.new_object({
                    "apiVersion": API, "kind": "ResourceClaim",
                    "metadata": {"name": base + api.safe_text(os.urandom(8), 5),
                                 "namespace": meta.get("namespace", "default"),
                                 "labels": dict(tmeta.get("labels") or {}),
                                 "annotations": dict(tmeta.get("annotations") or {},
                                                     **{POD_CLAIM_NAME: entry.get("name")}),
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                      "uid": meta.get("uid"), "controller": True,
                                                      "blockOwnerDeletion": True}]},
                    "spec": (template.get("spec") or {}).get("spec") or {}})
                items.append(claim)
                changed = True
            if claim is not None and entry.get("resourceClaimTemplateName"):
                statuses.append({"name": entry.get("name"), "resourceClaimName": claim["metadata"]["name"]})
        status = pod.setdefault("status", {})
        if statuses and status.get("resourceClaimStatuses") != statuses:
            status["resourceClaimStatuses"] = statuses
            changed = True
    for claim in [o for o in items if o.get("kind") == "ResourceClaim"]:
        cmeta, status = claim["metadata"], claim.setdefault("status", {})
        owner = next((r for r in cmeta.get("ownerReferences") or [] if r.get("kind") == "Pod"), None)
        if owner is not None and POD_CLAIM_NAME in (cmeta.get("annotations") or {}) and owner.get("uid") not in pods:
            items.remove(claim)
            changed = True
            continue
        reserved = [r for r in status.get("reservedFor") or []
                    if r.get("uid") in pods and not pod_done(pods[r["uid"]])]
        if reserved != (status.get("reservedFor") or []):
            status["reservedFor"] = reserved
            changed = True
        if not reserved and status.get("allocation"):
            status.pop("allocation")
            status.pop("reservedFor", None)
            changed = True
    return changed


def _attribute(device, domain, name):
    attributes = device.get("attributes") or {}
    value = attributes.get("%s/%s" % (domain, name)) or (attributes.get(name) if domain == DRIVER else None) or {}
    return value.get("string", value.get("version"))


def selects(selectors, driver, device):
    """Whether every CEL selector selects the device (the conjunction forms named in this module's docstring)."""
    for selector in selectors or []:
        expression = (selector.get("cel") or {}).get("expression", "")
        for term in (t.strip() for t in expression.split("&&")):
            match_driver, match_attribute = _SELECT_DRIVER.match(term), _SELECT_ATTRIBUTE.match(term)
            if match_driver:
                ok = match_driver.group(1) == driver
            elif match_attribute:
                domain, name, value = match_attribute.groups()
                ok = domain == driver and _attribute(device, domain, name) == value
            else:
                ok = False
            if not ok:
                return False
    return True


def _held(items):
    """(driver, pool, device) of every device some claim's allocation holds."""
    return {(r.get("driver"), r.get("pool"), r.get("device")) for c in items if c.get("kind") == "ResourceClaim"
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []}


def _allocated_node(claim):
    terms = ((((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {})
             .get("nodeSelectorTerms") or [])
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                return (field.get("values") or [None])[0]
    return None


def plan_allocation(pod, node, items):
    """The allocations the pod's unallocated claims get on ``node``: (reason or None, [(claim, results)]).

    The reason is the scheduler's: a claim not yet made, one allocated for another node, or no fit."""
    name = node["metadata"]["name"]
    held = _held(items)
    free = [(s["spec"]["pool"]["name"], d) for s in node_slices(items, name) for d in s["spec"].get("devices") or []]
    plans = []
    for entry in _pod_claims(pod):
        claim = claim_for(items, pod, entry)
        if claim is None:
            return "waiting for dynamic resource controller to create the resourceclaim \"%s\"" % entry.get(
                "name"), []
        if (claim.get("status") or {}).get("allocation"):
            if _allocated_node(claim) not in (None, name):
                return "resourceclaim not available on the node", []
            continue
        results = []
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            device_class = api.find(items, "DeviceClass", exactly.get("deviceClassName") or "")
            if device_class is None:
                return CANNOT_ALLOCATE, []
            selectors = ((device_class.get("spec") or {}).get("selectors") or []) + (exactly.get("selectors") or [])
            fits = [(pool, d) for pool, d in free if (DRIVER, pool, d["name"]) not in held
                    and selects(selectors, DRIVER, d)]
            want = len(fits) if exactly.get("allocationMode") == "All" else int(exactly.get("count", 1))
            if not fits or len(fits) < want:
                return CANNOT_ALLOCATE, []
            for pool, device in fits[:want]:
                results.append({"request": request.get("name"), "driver": DRIVER, "pool": pool,
                                "device": device["name"]})
                held.add((DRIVER, pool, device["name"]))
        plans.append((claim, results))
    return None, plans


def unfit(pod, node, items):
    """The DynamicResources filter's reason ``node`` cannot run ``pod``, or None."""
    if not wants_claims(pod):
        return None
    return plan_allocation(pod, node, items)[0]


def allocate(pod, node, items):
    """At binding: the pod's claims allocated on ``node`` and reserved for it."""
    if not wants_claims(pod):
        return
    _, plans = plan_allocation(pod, node, items)
    name = node["metadata"]["name"]
    for claim, results in plans:
        claim.setdefault("status", {})["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [name]}]}]}}
    meta = pod["metadata"]
    for entry in _pod_claims(pod):
        claim = claim_for(items, pod, entry)
        status = claim.setdefault("status", {})
        reserved = status.setdefault("reservedFor", [])
        if not any(r.get("uid") == meta.get("uid") for r in reserved):
            reserved.append({"resource": "pods", "name": meta["name"], "uid": meta.get("uid")})


def pod_devices(pod, items):
    """The device names allocated to the pod's claims, or None while a claim is missing, unallocated or not
    reserved for the pod (its kubelet waits)."""
    out = []
    for entry in _pod_claims(pod):
        claim = claim_for(items, pod, entry)
        status = (claim or {}).get("status") or {}
        if not status.get("allocation") or not any(
                r.get("uid") == pod["metadata"].get("uid") for r in status.get("reservedFor") or []):
            return None
        out += [r["device"] for r in status["allocation"]["devices"].get("results") or []]
    return out


def parent_gpu(device_name):
    """The GPU minor of ``gpu-N`` or ``gpu-N-mig-...``."""
    match = re.match(r"^gpu-(\d+)", device_name or "")
    return int(match.group(1)) if match else 0


def publish(server, items, node_name, read=read_devices):
    """The plugin's part on this node: its ResourceSlice created or updated while the plugin's DaemonSet selects the
    node (and the driver lists devices), deleted once it does not."""
    node = api.find(items, "Node", node_name)
    if node is None:
        return
    mine = sorted(node_slices(items, node_name), key=lambda s: s["metadata"]["name"])
    if not plugin_selects(items, (node.get("metadata") or {}).get("labels")):
        for stale in mine:
            api.delete(server, "ResourceSlice", stale["metadata"]["name"])
        return
    devices = read()
    if not devices:
        return  # no driver loaded: the plugin's init container would still be waiting
    current = mine[0] if mine else None
    want = desired_slice(node, devices, current, api.safe_text(os.urandom(8), 5))
    if current is None or (current.get("spec"), current["metadata"].get("ownerReferences")) != \
            (want["spec"], want["metadata"]["ownerReferences"]):
        api.put(server, want)
    for extra in mine[1:]:
        api.delete(server, "ResourceSlice", extra["metadata"]["name"])

"""The GPU dashboard against the exporter it reads and the scrape configuration that feeds it.

The counters file is NVIDIA's own (``gpu_provision/data/dcgm-exporter/``, copied from dcgm-exporter's
``etc/default-counters.csv`` at the tag the cluster file's default image pins), so a metric the pinned exporter does
not export by default fails here instead of leaving an empty panel on a user's Grafana.
"""

from __future__ import annotations

import json
import re
from importlib import resources

import yaml

from gpu_provision.k8s import applied, dashboard, monitoring
from gpu_provision.spec.model import Cluster
from gpu_provision.spec.settings import default

METRIC = re.compile(r"\b(DCGM_FI_[A-Z0-9_]+)\b")
#: The labels dcgm-exporter 4.2.3-4.1.3 puts on every series (internal/pkg/rendermetrics/render_metrics.go), the
#: Kubernetes ones it adds with DCGM_EXPORTER_KUBERNETES, and Prometheus' job and instance.
EXPORTER_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname",
                   "DCGM_FI_DRIVER_VERSION", "namespace", "pod", "container", "job", "instance"}


def exporter_version() -> str:
    image = default("cluster.kubernetes.monitoring.dcgm_exporter_image")
    tag = image.rsplit(":", 1)[1]
    return tag.rsplit("-", 1)[0]  # 4.2.3-4.1.3-ubuntu22.04 -> 4.2.3-4.1.3


def enabled_counters() -> set[str]:
    name = f"default-counters-{exporter_version()}.csv"
    text = resources.files("gpu_provision").joinpath("data", "dcgm-exporter", name).read_text()
    return {line.split(",", 1)[0].strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def queries(doc: dict) -> list[str]:
    return [target["expr"] for panel in doc["panels"] for target in panel["targets"]]


def test_counters_file_is_the_pinned_exporters() -> None:
    counters = enabled_counters()
    assert "DCGM_FI_DEV_GPU_TEMP" in counters
    assert "DCGM_FI_PROF_SM_ACTIVE" not in counters  # commented out in NVIDIA's default file


def test_every_queried_metric_is_exported_by_default() -> None:
    counters = enabled_counters()
    doc = dashboard.dashboard(monitoring.SCRAPE_JOB)
    used = {m for expr in queries(doc) for m in METRIC.findall(expr)}
    used |= {m for var in doc["templating"]["list"] for m in METRIC.findall(json.dumps(var))}
    assert used, "the dashboard queries no exporter metric"
    assert used <= counters, sorted(used - counters)


def test_panels_cover_what_operators_watch() -> None:
    metrics = {panel.metric for panel in dashboard.PANELS}
    assert {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"} <= metrics


def test_scrape_config_and_dashboard_agree_on_job_and_labels(example: Cluster) -> None:
    scrape = yaml.safe_load(monitoring.scrape_config(example))["scrape_configs"][0]
    doc = dashboard.dashboard(monitoring.SCRAPE_JOB)
    target_labels = set().union(*(set(group["labels"]) for group in scrape["static_configs"]))
    for expr in queries(doc):
        assert f'job="{scrape["job_name"]}"' in expr, expr
        selected = set(re.findall(r"\b([A-Za-z_]+)=~?\"", expr)) - {"job"}
        assert selected <= target_labels, (expr, target_labels)
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"cluster", "node"} <= variables and {"cluster", "node"} <= target_labels
    legend_labels = set(re.findall(r"\{\{(\w+)\}\}", dashboard.LEGEND))
    assert legend_labels <= target_labels | EXPORTER_LABELS, legend_labels


def test_dashboard_ships_as_a_sidecar_configmap(example: Cluster) -> None:
    objects = applied.manifests(example)["monitoring"]
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert len(maps) == 1
    cm = maps[0]
    assert cm["metadata"]["labels"][dashboard.SIDECAR_LABEL] == "1"
    assert cm["metadata"]["namespace"] == monitoring.NAMESPACE
    (name, text), = cm["data"].items()
    assert name.endswith(".json")
    doc = json.loads(text)
    assert doc["uid"] == dashboard.UID and len(doc["panels"]) == len(dashboard.PANELS)
    positions = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in doc["panels"]}
    assert len(positions) == len(doc["panels"])  # no two panels on top of each other

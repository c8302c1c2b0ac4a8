"""The GPU dashboard: a Grafana dashboard on the DCGM exporter's metrics, shipped as a ConfigMap for Grafana's sidecar.

Every panel shows one series per GPU and, on MIG GPUs, one per slice: the exporter labels a slice's series with
``GPU_I_PROFILE`` and ``GPU_I_ID`` beside ``gpu`` (dcgm-exporter 4.2.3-4.1.3,
``internal/pkg/rendermetrics/render_metrics.go``), and the scrape configuration (``monitoring.scrape_config``) adds
``node`` and ``cluster`` to every target, which the dashboard's variables select on. The panels query only metrics
the pinned exporter's default counters file enables (``data/dcgm-exporter/``), so a stock exporter fills every
panel; ``tests/k8s/test_dashboard.py`` holds the two to each other.

Grafana's Helm chart loads dashboards from ConfigMaps labelled ``grafana_dashboard`` when its dashboard sidecar is
on (``sidecar.dashboards.enabled``, ``sidecar.dashboards.label: grafana_dashboard``: grafana/helm-charts,
``charts/grafana/values.yaml``); the sidecar searches its own namespace unless
``sidecar.dashboards.searchNamespace`` names this one (or ``ALL``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpu_provision.k8s.objects import Obj, meta

#: The ConfigMap label Grafana's dashboard sidecar watches (grafana/helm-charts, charts/grafana/values.yaml,
#: ``sidecar.dashboards.label``); the sidecar takes any value unless ``labelValue`` is set.
SIDECAR_LABEL = "grafana_dashboard"
NAME = "gpu-provision-gpus"
UID = "gpu-provision-gpus"
#: One legend per series: the node, the GPU index and, for a MIG slice, its profile and GPU instance.
LEGEND = "{{node}} GPU {{gpu}} {{GPU_I_PROFILE}} {{GPU_I_ID}}"


@dataclass(frozen=True)
class Panel:
    """One time-series panel: the exporter metric it plots, how, and in which unit (Grafana's unit ids)."""

    title: str
    metric: str
    unit: str
    description: str
    expression: str = "{metric}{{{selector}}}"

    def query(self, selector: str) -> str:
        return self.expression.format(metric=self.metric, selector=selector)


#: The panels, in order. Units are Grafana's (``percentunit`` for 0-1 ratios, ``percent`` for 0-100, ``decmbytes``
#: for MiB as the exporter reports framebuffer sizes, ``Bps`` for bytes per second).
PANELS: tuple[Panel, ...] = (
    Panel("SM activity (graphics engine active)", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "percentunit",
          "Ratio of time the graphics engine is active; per MIG slice where MIG is on."),
    Panel("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL", "percent",
          "NVML's utilisation; NVML reports none for MIG slices (use SM activity there)."),
    Panel("Memory copy utilisation", "DCGM_FI_DEV_MEM_COPY_UTIL", "percent",
          "Share of the sample period the memory was read or written."),
    Panel("Framebuffer used", "DCGM_FI_DEV_FB_USED", "decmbytes", "Framebuffer memory in use (MiB)."),
    Panel("Framebuffer free", "DCGM_FI_DEV_FB_FREE", "decmbytes", "Framebuffer memory free (MiB)."),
    Panel("PCIe received", "DCGM_FI_PROF_PCIE_RX_BYTES", "Bps", "Bytes per second received over PCIe."),
    Panel("PCIe transmitted", "DCGM_FI_PROF_PCIE_TX_BYTES", "Bps", "Bytes per second sent over PCIe."),
    Panel("GPU temperature", "DCGM_FI_DEV_GPU_TEMP", "celsius", "GPU temperature."),
    Panel("Power draw", "DCGM_FI_DEV_POWER_USAGE", "watt", "Board power draw."),
    Panel("Xid errors in the range", "DCGM_FI_DEV_XID_ERRORS", "short",
          "How often the last Xid code changed in the selected range (the exporter reports the last Xid's value, "
          "not a count: a repeated Xid shows once). docs/troubleshooting.md says what each code means.",
          expression="changes({metric}{{{selector}}}[$__range])"),
)


def selector(job: str) -> str:
    """The label selector every query shares: the scrape job and the dashboard's cluster and node variables."""
    return f'job="{job}",cluster=~"$cluster",node=~"$node"'


def _variable(name: str, query: str) -> dict[str, Any]:
    return {"name": name, "label": name, "type": "query", "datasource": {"type": "prometheus", "uid": "$datasource"},
            "query": {"query": query, "refId": name}, "definition": query, "includeAll": True, "multi": True,
            "current": {"text": "All", "value": "$__all"}, "refresh": 2, "sort": 1}


def dashboard(job: str) -> dict[str, Any]:
    """The dashboard's JSON model, querying the metrics of scrape job ``job``."""
    where = selector(job)
    panels = []
    for i, panel in enumerate(PANELS):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": panel.title, "description": panel.description,
            "datasource": {"type": "prometheus", "uid": "$datasource"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "targets": [{"refId": "A", "expr": panel.query(where), "legendFormat": LEGEND}],
        })
    templating = [
        {"name": "datasource", "label": "data source", "type": "datasource", "query": "prometheus"},
        _variable("cluster", f'label_values(DCGM_FI_DEV_GPU_TEMP{{job="{job}"}}, cluster)'),
        _variable("node", f'label_values(DCGM_FI_DEV_GPU_TEMP{{job="{job}",cluster=~"$cluster"}}, node)'),
    ]
    return {"uid": UID, "title": "GPUs (gpu-provision)", "tags": ["gpu", "dcgm", "gpu-provision"],
            "schemaVersion": 39, "editable": False, "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
            "templating": {"list": templating}, "panels": panels}


def configmap(namespace: str, job: str) -> Obj:
    """The dashboard as a ConfigMap Grafana's dashboard sidecar imports (one JSON file, the dashboard's model)."""
    text = json.dumps(dashboard(job), indent=1, sort_keys=True)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(NAME, namespace, {SIDECAR_LABEL: "1"}),
            "data": {f"{NAME}.json": text}}

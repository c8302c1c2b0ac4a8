"""The benchmark workload as a stock pyinfra deploy (pyinfra's own operations and facts, no batched probe).

    GPU_PROVISION_BENCH_WORKLOAD=workload.json pyinfra inventory.py bench/stock_deploy.py --dry

pyinfra has no operation for package holds (``server.shell`` would report a change on every run), so holds are
not checked here; the other tools check them.
"""

import io
import json
import os

from pyinfra.operations import apt, files, server, systemd

with open(os.environ["GPU_PROVISION_BENCH_WORKLOAD"], encoding="utf-8") as _f:
    WORKLOAD = json.load(_f)

apt.packages(name="Pinned packages",
             packages=[f"{name}={version}" for name, version in sorted(WORKLOAD["versions"].items())])
for entry in WORKLOAD["files"]:
    files.put(name=f"Config {entry['path']}", src=io.StringIO(entry["text"]), dest=entry["path"],
              mode="644", user="root", group="root")
for unit in WORKLOAD["units"]:
    systemd.service(name=f"Service {unit}", service=unit, running=True, enabled=True)
server.group(name=f"Group {WORKLOAD['group']}", group=WORKLOAD["group"])
server.user(name=f"Member {WORKLOAD['member']}", user=WORKLOAD["member"], groups=[WORKLOAD["group"]], append=True,
            ensure_home=False)

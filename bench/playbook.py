"""The benchmark workload as an Ansible playbook and inventory (run with ``--check --diff``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_playbook(folder: Path, workload: dict[str, Any]) -> Path:
    """Write ``playbook.yml`` and the files it copies into ``folder``; returns the playbook path.

    The playbook is written as JSON, which YAML readers accept unchanged.
    """
    files = folder / "files"
    files.mkdir(parents=True, exist_ok=True)
    tasks: list[dict[str, Any]] = [
        {"name": "Pinned packages",
         "ansible.builtin.apt": {"name": [f"{n}={v}" for n, v in sorted(workload["versions"].items())],
                                 "state": "present"}},
        {"name": "Package holds", "ansible.builtin.dpkg_selections": {"name": "{{ item }}", "selection": "hold"},
         "loop": list(workload["held"])},
    ]
    for entry in workload["files"]:
        local = files / Path(entry["path"]).name
        local.write_text(entry["text"])
        tasks.append({"name": f"Config {entry['path']}",
                      "ansible.builtin.copy": {"src": str(local), "dest": entry["path"], "mode": "0644",
                                               "owner": "root", "group": "root"}})
    for unit in workload["units"]:
        tasks.append({"name": f"Service {unit}",
                      "ansible.builtin.systemd": {"name": unit, "state": "started", "enabled": True}})
    tasks.append({"name": f"Group {workload['group']}", "ansible.builtin.group": {"name": workload["group"]}})
    tasks.append({"name": f"Member {workload['member']}",
                  "ansible.builtin.user": {"name": workload["member"], "groups": [workload["group"]],
                                           "append": True, "create_home": False}})
    play = [{"name": "gpu-provision benchmark workload", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    path = folder / "playbook.yml"
    path.write_text(json.dumps(play, indent=1))
    return path


def write_inventory(path: Path, hosts: list[tuple[str, str]], key: Path, known_hosts: Path) -> Path:
    """An INI inventory: each host by name with its address, root login with ``key``, host keys checked."""
    common = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    lines = ["[all]"]
    lines += [f"{name} ansible_host={address}" for name, address in hosts]
    lines += ["", "[all:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={key}",
              f"ansible_ssh_common_args='{common}'", "ansible_python_interpreter=/usr/bin/python3"]
    path.write_text("\n".join(lines) + "\n")
    return path

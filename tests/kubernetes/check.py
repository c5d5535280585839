"""What kubernetes-validate cannot see in deploy/kubernetes/: that the
manifests agree with each other and with sluice (scripts/test-kubernetes.sh
runs it after the schema validation).

- The PrometheusRule holds exactly deploy/prometheus/sluice-rules.yml's
  groups (the rules CI unit-tests with promtool).
- The ServiceMonitor's endpoints name ports that Services it selects have.
- Every probe asks a port the container declares, for /livez or /readyz.
- The ConfigMap's sluice.toml is a config sluice accepts, and
  nats-values.yaml carries exactly the mapping and payload limit that
  `sluice nats-config` prints for it.

Exits 1 with one line per problem. Needs SLUICE_BIN (the sluice binary).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def check_rules(monitoring: list[dict]) -> list[str]:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/sluice-rules.yml").read_text())
    (rule,) = of_kind(monitoring, "PrometheusRule")
    if rule["spec"]["groups"] != rules["groups"]:
        return ["monitoring.yaml: the PrometheusRule's groups differ from deploy/prometheus/sluice-rules.yml's; copy them again"]
    return []


def check_service_monitor(monitoring: list[dict], services: list[dict]) -> list[str]:
    problems = []
    for sm in of_kind(monitoring, "ServiceMonitor"):
        selected = [s for s in services if matches(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        ports = {p["name"] for s in selected for p in s["spec"]["ports"]}
        for endpoint in sm["spec"]["endpoints"]:
            if endpoint["port"] not in ports:
                problems.append(f"ServiceMonitor {sm['metadata']['name']}: no selected Service has a port {endpoint['port']!r}")
    return problems


def check_probes(deployments: list[dict]) -> list[str]:
    problems = []
    for d in deployments:
        for c in d["spec"]["template"]["spec"]["containers"]:
            ports = {p["name"] for p in c.get("ports", [])}
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = c.get(kind)
                if probe is None:
                    continue
                get = probe["httpGet"]
                if get["port"] not in ports:
                    problems.append(f"{d['metadata']['name']}: {kind} asks port {get['port']!r}, not declared")
                want = "/readyz" if kind == "readinessProbe" else "/livez"
                if get["path"] != want:
                    problems.append(f"{d['metadata']['name']}: {kind} asks {get['path']}, not {want}")
    return problems


def nats_config(toml: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
        f.write(toml)
        f.flush()
        out = subprocess.run(
            [os.environ["SLUICE_BIN"], "nats-config", "--config", f.name],
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        raise SystemExit(f"sluice.yaml's sluice.toml is refused: {out.stderr.strip()}")
    return out.stdout


def check_nats_values(sluice: list[dict]) -> list[str]:
    (config_map,) = of_kind(sluice, "ConfigMap")
    printed = nats_config(config_map["data"]["sluice.toml"])
    # Keys of one token (rl.allow.*) and grouped keys' (rl.allow.*.*, rl.allow.*.*.*).
    mappings = dict(re.findall(r'^\s*"(rl\.[a-z]+(?:\.\*)+)": "([^"]+)"$', printed, re.M))
    payload = int(re.search(r"^max_payload: (\d+)", printed, re.M).group(1))
    merge = yaml.safe_load((K8S / "nats-values.yaml").read_text())["config"]["merge"]
    problems = []
    if merge["mappings"] != mappings:
        problems.append(f"nats-values.yaml: mappings {merge['mappings']} are not what sluice nats-config prints: {mappings}")
    if merge["max_payload"] != payload:
        problems.append(f"nats-values.yaml: max_payload {merge['max_payload']}, sluice nats-config prints {payload}")
    if not mappings:
        problems.append("sluice nats-config printed no mapping")
    return problems


def main() -> int:
    sluice = documents("sluice.yaml")
    monitoring = documents("monitoring.yaml")
    problems = (
        check_rules(monitoring)
        + check_service_monitor(monitoring, of_kind(sluice, "Service"))
        + check_probes(of_kind(sluice, "Deployment"))
        + check_nats_values(sluice)
    )
    for p in problems:
        print(f"check: {p}", file=sys.stderr)
    if not problems:
        print("check: deploy/kubernetes agrees with the rules, its Services, its probes and sluice nats-config")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

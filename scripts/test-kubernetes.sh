#!/usr/bin/env bash
# Validates the Kubernetes manifests of deploy/kubernetes/:
#
# 1. kubernetes-validate (PyPI, installed into .tools/venv by
#    scripts/install-deps.sh) checks every object of sluice.yaml and
#    monitoring.yaml against the schemas of Kubernetes 1.37, strictly
#    (unknown fields are errors). The Prometheus Operator's kinds
#    (ServiceMonitor, PrometheusRule) have no schema there: any other
#    warning fails.
# 2. tests/kubernetes/check.py checks what schemas cannot: the
#    PrometheusRule holds deploy/prometheus/sluice-rules.yml's rules, the
#    ServiceMonitor's ports exist, every probe asks /livez or /readyz on a
#    declared port, and nats-values.yaml carries the mapping `sluice
#    nats-config` prints for the ConfigMap's config.
#
#   scripts/test-kubernetes.sh          (SLUICE_BIN: the sluice binary; built if unset)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.tools/venv/bin/python"
VALIDATE="$ROOT/.tools/venv/bin/kubernetes-validate"
[ -x "$VALIDATE" ] ||
    { echo "test-kubernetes: kubernetes-validate not found; run scripts/install-deps.sh" >&2; exit 1; }
SLUICE_BIN="$(scripts/sluice-bin.sh)"
export SLUICE_BIN

K8S_VERSION=1.37.0
out="$("$VALIDATE" --strict -k "$K8S_VERSION" deploy/kubernetes/sluice.yaml deploy/kubernetes/monitoring.yaml 2>&1)" || {
    echo "$out" >&2
    echo "test-kubernetes: kubernetes-validate refused a manifest" >&2
    exit 1
}
echo "$out"
unexpected="$(echo "$out" | grep -v '^INFO ' |
    grep -v "Couldn't find schema for kind \(ServiceMonitor\|PrometheusRule\) with api version monitoring.coreos.com/v1" || true)"
if [ -n "$unexpected" ]; then
    echo "test-kubernetes: unexpected output from kubernetes-validate:" >&2
    echo "$unexpected" >&2
    exit 1
fi
"$PY" tests/kubernetes/check.py

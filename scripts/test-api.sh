#!/usr/bin/env bash
# Checks the gateway's HTTP API against its OpenAPI description
# (docs/openapi.json, generated from the handlers: services/gateway/src/api.rs).
#
#   scripts/test-api.sh [schemathesis run args...]
#
# 1. scripts/install-deps.sh (nats-server) and scripts/python-venv.sh
#    (openapi-spec-validator and schemathesis, the client's `api` extras);
# 2. openapi-spec-validator validates docs/openapi.json (OpenAPI 3.1);
# 3. the sluice binary (scripts/sluice-bin.sh), then `sluice dev` (nats-server, 2 workers)
#    on free loopback ports and beside it a `sluice gateway` with its config,
#    an --api-token and an --api-read-token; the gateway must serve the
#    committed description at /v1/openapi.json;
# 4. the checks can fail: first, on the fresh stack, a copy of the
#    description in which a decision must carry a field no reply has, and
#    the only parameter is a key (under the default policy), is run against
#    GET /v1/allow/{key}; schemathesis must report that the reply breaks it.
# 5. schemathesis runs every operation against that gateway with the full
#    token, checking for server errors, replies that do not match their
#    schema (bodies, content types, headers) and status codes the
#    description does not list: any failure fails this script. Bounded by
#    SLUICE_API_EXAMPLES examples per operation (default 30) and
#    SLUICE_API_SECONDS for the whole run (default 60). The alerts' event
#    stream (`stream_alerts`) is left out: it never ends, so schemathesis
#    would wait on it; services/cli/tests/cli/gateway/api.rs reads it.
#
# Everything it started is stopped at the end, by its PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "==> test dependencies"
nats_server="$(scripts/install-deps.sh)"
export SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$nats_server}"
PY="$(scripts/python-venv.sh)"
BIN="$(dirname "$PY")"

echo "==> openapi-spec-validator docs/openapi.json"
"$PY" -m openapi_spec_validator docs/openapi.json

SLUICE="$(scripts/sluice-bin.sh)"

work="$(mktemp -d)"
pids=()
# Each stops on SIGINT (the workers hand over first); one that has not
# within 30 s is killed.
cleanup() {
    for pid in "${pids[@]}"; do
        kill -INT "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 300); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

read -r nats_port dev_port gw_port < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)
full="full-$RANDOM$RANDOM"
read_only="read-$RANDOM$RANDOM"

echo "==> sluice dev (nats-server on 127.0.0.1:$nats_port, 2 workers)"
env -u SLUICE_CONFIG "$SLUICE" dev --workers 2 --nats-port "$nats_port" \
    --listen "127.0.0.1:$dev_port" </dev/null >/dev/null 2>"$work/dev.log" &
pids+=($!)
# Ready once its self-check printed its answers: the workers own every partition.
for _ in $(seq 900); do
    if grep -A1 "sluice dev: self-check" "$work/dev.log" | sed -n 2p | grep -q .; then
        break
    fi
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$work/dev.log" >&2; exit 1; }
    sleep 0.1
done
grep -q "sluice dev: self-check" "$work/dev.log" || { echo "sluice dev did not start" >&2; cat "$work/dev.log" >&2; exit 1; }

echo "==> sluice gateway on 127.0.0.1:$gw_port (--api-token, --api-read-token)"
SLUICE_API_TOKEN="$full" SLUICE_API_READ_TOKEN="$read_only" \
    "$SLUICE" --config config/sluice.toml --nats "nats://127.0.0.1:$nats_port" gateway \
    --listen "127.0.0.1:$gw_port" --timeout 2s --no-ui </dev/null >/dev/null 2>"$work/gateway.log" &
pids+=($!)
base="http://127.0.0.1:$gw_port"
for _ in $(seq 300); do
    if "$PY" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$base/healthz" 2>/dev/null; then
        break
    fi
    kill -0 "${pids[1]}" 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
    sleep 0.1
done

echo "==> the gateway serves the committed description"
"$PY" - "$base/v1/openapi.json" docs/openapi.json <<'EOF'
import json, sys, urllib.request
served = json.load(urllib.request.urlopen(sys.argv[1], timeout=5))
committed = json.load(open(sys.argv[2]))
assert served == committed, "/v1/openapi.json differs from docs/openapi.json"
EOF

echo "==> the checks can fail: a decision that must carry a field no reply has"
"$PY" - docs/openapi.json "$work/broken.json" <<'EOF'
import json, sys
api = json.load(open(sys.argv[1]))
api["components"]["schemas"]["DecisionReply"]["required"].append("no_such_field")
# Only the key, under the default policy: a generated policy name, cost
# or wait would mostly be answered 404/400, and no decision would be
# checked. (Before the fuzzing, which may rewrite the default policy.)
allow = api["paths"]["/v1/allow/{key}"]["get"]
allow["parameters"] = [
    dict(p, schema={"type": "string", "enum": [f"schema-check-{i}" for i in range(8)]})
    for p in allow["parameters"] if p["name"] == "key"
]
json.dump(api, open(sys.argv[2], "w"))
EOF
if (cd "$work" && "$BIN/schemathesis" run "$work/broken.json" --url "$base" \
    -H "Authorization: Bearer $full" --checks response_schema_conformance \
    --include-operation-id allow --max-examples 5 --phases examples,fuzzing --seed 54 --no-color \
    >"$work/broken.log" 2>&1); then
    cat "$work/broken.log" >&2
    echo "test-api: schemathesis passed a reply that breaks its schema" >&2
    exit 1
fi
grep -q "no_such_field" "$work/broken.log" || { cat "$work/broken.log" >&2; exit 1; }
echo "    schemathesis failed it, naming no_such_field: as it must"

checks="not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance"
echo "==> schemathesis: every operation, checks $checks"
started=$SECONDS
# From the temporary directory: schemathesis keeps a cache of the failures
# it saw in its working directory, which must not outlive the run. One
# worker: with two, its schema walk failed now and then with CPython 3.11's
# "SystemError: AST constructor recursion depth mismatch" (threads parsing
# at once), a runtime error of the tool, not a finding.
(cd "$work" && "$BIN/schemathesis" run "$ROOT/docs/openapi.json" --url "$base" \
    -H "Authorization: Bearer $full" \
    --checks "$checks" \
    --exclude-operation-id stream_alerts \
    --max-examples "${SLUICE_API_EXAMPLES:-30}" --max-time "${SLUICE_API_SECONDS:-60}" \
    --request-timeout 15 --seed 54 --no-color --workers 1 "$@")
echo "    schemathesis took $((SECONDS - started)) s"


#!/usr/bin/env bash
# Runs each cargo-fuzz target for a bounded time (docs/TESTING.md, "Fuzzing"):
#
#   bench/fuzz.sh [SECONDS] [TARGET...]   # default 60 s each, every target
#
# The targets (fuzz/fuzz_targets/*.rs, a crate outside the workspace) feed
# arbitrary bytes to what sluice reads from the network or from an
# operator's files: request bodies, batches, key tokens, the config (TOML),
# policy and override JSON, the [envoy] table. docs/TESTING.md lists them
# with the figures of the last run.
#
# Needs the nightly toolchain (`rustup toolchain install nightly`) and
# cargo-fuzz, which it installs from crates.io when missing
# (`cargo install cargo-fuzz --locked`). Each run starts from the committed
# seeds (fuzz/seeds/<target>) and the corpus of earlier runs
# (fuzz/corpus/<target>, not committed), on one core, with at most 2 GB of
# memory and 10 s per input.
#
# Exit status: 0 when no target crashed; 1 otherwise, with the crashing
# input under fuzz/artifacts/<target>/. Turn each into a regression test in
# the normal suite (a plain unit test with the input as a byte string)
# together with the fix. At the end it prints one line per target:
# executions, time, new corpus entries, result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-60}"
shift || true
case "$SECONDS_EACH" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac
export CARGO_INCREMENTAL=0

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: needs the nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from crates.io" >&2
    cargo install cargo-fuzz --locked
fi

cd "$ROOT/fuzz"
if [ $# -gt 0 ]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo +nightly fuzz list)
fi
echo "fuzz: building ${TARGETS[*]} (cargo +nightly fuzz build, release, address sanitizer)" >&2
cargo +nightly fuzz build >&2

failed=()
summary=()
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "seeds/$t"
    before="$(find "corpus/$t" -type f | wc -l)"
    log="$(mktemp -t "sluice-fuzz-$t.XXXXXX.log")"
    echo "fuzz: $t for ${SECONDS_EACH}s (log: $log)" >&2
    rc=0
    # -max_total_time bounds the run; timeout(1) bounds it again in case
    # libFuzzer itself hangs.
    timeout -k 10 $((SECONDS_EACH + 120)) cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$log" 2>&1 || rc=$?
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    after="$(find "corpus/$t" -type f | wc -l)"
    if [ "$rc" = 0 ]; then
        result="no crash"
        rm -f "$log"
    else
        result="CRASH (exit $rc): $(grep -m1 -E 'panicked at|ERROR: (libFuzzer|AddressSanitizer)' "$log" || echo "see $log")"
        failed+=("$t")
        tail -n 40 "$log" >&2
    fi
    summary+=("$(printf '%-8s %12s execs in %ss, corpus %s -> %s: %s' "$t" "${execs:-?}" "$SECONDS_EACH" "$before" "$after" "$result")")
done

printf '\nfuzz: summary\n'
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: ${#failed[@]} target(s) crashed: ${failed[*]}; inputs in fuzz/artifacts/<target>/" >&2
    exit 1
fi

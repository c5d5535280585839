#!/usr/bin/env bash
# Runs the documentation's examples (README.md, clients/python/README.md,
# docs/*.md) against a fresh `sluice dev` per document; what is run, and how
# a block that cannot run is marked: tests/docs/test_examples.py.
#
#   scripts/test-docs.sh [pytest args...]
#
# It is scripts/test-python.sh --docs: the same dependencies, venv and build.
exec "$(dirname "${BASH_SOURCE[0]}")/test-python.sh" --docs "$@"

"""Asks Envoy's rate limit service once, as Envoy would, and prints the
answer: ``OK`` or ``OVER_LIMIT``, then one line per descriptor.

    python clients/python/tests/rls/ask.py HOST:PORT DOMAIN KEY=VALUE[,KEY=VALUE...] ...

Each further argument is one descriptor. Exit 0 with an answer, 1 with the
gRPC error. Used by scripts/e2e-compose.sh (needs grpcio and grpcio-tools:
scripts/python-venv.sh).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import protos  # noqa: E402


def main(argv) -> int:
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    address, domain, descriptors = argv[0], argv[1], argv[2:]
    with tempfile.TemporaryDirectory(prefix="sluice-rls-ask-") as out:
        rls = protos.load(Path(out))
        request = rls.pb.RateLimitRequest(domain=domain)
        for text in descriptors:
            d = request.descriptors.add()
            for entry in text.split(","):
                key, _, value = entry.partition("=")
                d.entries.append(rls.descriptor.RateLimitDescriptor.Entry(key=key, value=value))
        with grpc.insecure_channel(address) as channel:
            try:
                r = rls.grpc.RateLimitServiceStub(channel).ShouldRateLimit(request, timeout=10)
            except grpc.RpcError as e:
                print("{}: {}".format(e.code().name, e.details()))
                return 1
        code = rls.pb.RateLimitResponse.Code.Name
        print(code(r.overall_code))
        for s in r.statuses:
            print(
                "{} remaining={} limit={}/{}".format(
                    code(s.code),
                    s.limit_remaining,
                    s.current_limit.requests_per_unit,
                    rls.pb.RateLimitResponse.RateLimit.Unit.Name(s.current_limit.unit),
                )
            )
        for h in r.response_headers_to_add:
            print("{}: {}".format(h.key, h.value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Real OTLP exporters of the Python OpenTelemetry SDK pushing for a while (the
connection tests): counter `py.push.requests` (resource rank=--rank) += 1 every 20 ms,
exported every 200 ms by a PeriodicExportingMetricReader over gRPC or HTTP (TLS with
--ca, plaintext without); the exporters retry what the collector refuses, and the
final export on shutdown carries the cumulative total. Prints one JSON line:
{"total": N}.
"""

import argparse
import json
import time

import grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

parser = argparse.ArgumentParser()
parser.add_argument("--protocol", choices=["grpc", "http"], required=True)
parser.add_argument("--endpoint", required=True)
parser.add_argument("--ca")
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--seconds", type=float, required=True)
args = parser.parse_args()

ca = open(args.ca, "rb").read() if args.ca else None
if args.protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

    if ca:
        exporter = OTLPMetricExporter(
            endpoint=args.endpoint, credentials=grpc.ssl_channel_credentials(root_certificates=ca), timeout=10
        )
    else:
        exporter = OTLPMetricExporter(endpoint=args.endpoint, insecure=True, timeout=10)
else:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    exporter = OTLPMetricExporter(endpoint=args.endpoint + "/v1/metrics", certificate_file=args.ca or True, timeout=10)

reader = PeriodicExportingMetricReader(exporter, export_interval_millis=200, export_timeout_millis=30000)
resource = Resource.create(
    {"service.name": "py-push", "rank": args.rank, "service.instance.id": f"py-push-{args.rank}"}
)
provider = MeterProvider(resource=resource, metric_readers=[reader])
counter = provider.get_meter("py-push").create_counter("py.push.requests", unit="{request}")
total = 0
end = time.monotonic() + args.seconds
while time.monotonic() < end:
    counter.add(1)
    total += 1
    time.sleep(0.02)
provider.shutdown()
print(json.dumps({"total": total}), flush=True)

"""A worker instrumented with the plain OpenTelemetry Python SDK (no higgsmeter).

Records known amounts, pushes OTLP to the collector every 200 ms, and flushes on exit:
  worker_activity_time_seconds_total{state=gpu, operation=py_step} += 0.25, 8 times  (2.0 s)
  py.requests (counter, {request})                                  += 1, 10 times
  py.latency  (histogram, s, default buckets)                       0.1, 0.5, 3, 30
"""

import argparse
import time

from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, ObservableCounter, UpDownCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

parser = argparse.ArgumentParser()
parser.add_argument("--endpoint", required=True)
parser.add_argument("--protocol", choices=["grpc", "http"], required=True)
parser.add_argument("--temporality", choices=["cumulative", "delta"], required=True)
parser.add_argument("--rank", type=int, required=True)
args = parser.parse_args()

temporality = AggregationTemporality.DELTA if args.temporality == "delta" else AggregationTemporality.CUMULATIVE
preferred = {Counter: temporality, Histogram: temporality, ObservableCounter: temporality, UpDownCounter: AggregationTemporality.CUMULATIVE}
if args.protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

    exporter = OTLPMetricExporter(endpoint=args.endpoint, insecure=True, preferred_temporality=preferred)
else:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    exporter = OTLPMetricExporter(endpoint=args.endpoint + "/v1/metrics", preferred_temporality=preferred)

resource = Resource.create({"service.name": "py-worker", "rank": args.rank, "service.instance.id": f"py-{args.rank}"})
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=200)
provider = MeterProvider(resource=resource, metric_readers=[reader])
meter = provider.get_meter("py-worker")
activity = meter.create_counter("worker_activity_time_seconds_total", unit="s", description="ignored: the catalog's help wins")
requests = meter.create_counter("py.requests", unit="{request}", description="Requests served")
latency = meter.create_histogram("py.latency", unit="s", description="Request latency")

for i in range(10):
    requests.add(1, {"route": "/generate"})
    if i < 8:
        activity.add(0.25, {"state": "gpu", "operation": "py_step"})
    if i < 4:
        latency.record([0.1, 0.5, 3.0, 30.0][i], {"route": "/generate"})
    time.sleep(0.06)

provider.shutdown()
print("done", flush=True)

"""An OTLP client of the Python OpenTelemetry SDK against a TLS (and token) receiver.

--mode exporter: records one counter (py.tls.requests += 3, resource rank=--rank) and
  exports it once with the SDK's own OTLPMetricExporter (gRPC with
  grpc.ssl_channel_credentials and an authorization header, or HTTP with
  certificate_file and headers); prints SUCCESS or FAILURE.
--mode raw: sends the same request through the generated gRPC stub and prints the
  gRPC status code's name (OK, UNAUTHENTICATED, UNAVAILABLE, ...).
Without --ca the client speaks plaintext.
"""

import argparse
import sys

import grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.resources import Resource

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["exporter", "raw"], required=True)
parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
parser.add_argument("--endpoint", required=True)
parser.add_argument("--ca")
parser.add_argument("--token")
parser.add_argument("--rank", type=int, required=True)
args = parser.parse_args()

reader = InMemoryMetricReader()
resource = Resource.create({"service.name": "py-tls", "rank": args.rank, "service.instance.id": f"py-tls-{args.rank}"})
provider = MeterProvider(resource=resource, metric_readers=[reader])
provider.get_meter("py-tls").create_counter("py.tls.requests", unit="{request}").add(3, {"route": "/x"})
data = reader.get_metrics_data()
headers = {"authorization": f"Bearer {args.token}"} if args.token else None
ca = open(args.ca, "rb").read() if args.ca else None

if args.mode == "exporter":
    if args.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        if ca:
            exporter = OTLPMetricExporter(
                endpoint=args.endpoint,
                credentials=grpc.ssl_channel_credentials(root_certificates=ca),
                headers=headers,
                timeout=3,
            )
        else:
            exporter = OTLPMetricExporter(endpoint=args.endpoint, insecure=True, headers=headers, timeout=3)
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(
            endpoint=args.endpoint + "/v1/metrics", certificate_file=args.ca or True, headers=headers, timeout=3
        )
    result = exporter.export(data)
    exporter.shutdown()
    print("SUCCESS" if result == MetricExportResult.SUCCESS else "FAILURE", flush=True)
    sys.exit(0)

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc

target = args.endpoint.split("://", 1)[-1]
channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca)) if ca else grpc.insecure_channel(target)
stub = metrics_service_pb2_grpc.MetricsServiceStub(channel)
try:
    stub.Export(encode_metrics(data), metadata=list(headers.items()) if headers else None, timeout=5)
    print("OK", flush=True)
except grpc.RpcError as e:
    print(e.code().name, flush=True)

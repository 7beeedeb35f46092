"""An OTLP receiver for the SDK's trace tests: gRPC (grpcio) and HTTP/protobuf, traces
and metrics, decoded with opentelemetry-proto.

Listens on 127.0.0.1 (ports chosen by the OS) and prints them as one JSON line:
  {"grpc": PORT, "http": PORT}
Then it receives until its stdin closes (the test closes it once the worker has exited,
so every export the worker made has been answered), or until --deadline seconds have
passed, and prints what it received as one JSON line:
  {"spans": [...], "metric_requests": N, "trace_requests": [{"transport", "headers"}]}
Each span: the resource's and the scope's attributes, ids in hex, name, kind, start and
end in Unix nanoseconds, attributes, status code.
"""

import argparse
import gzip
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

parser = argparse.ArgumentParser()
parser.add_argument("--deadline", type=float, default=120.0)
args = parser.parse_args()

lock = threading.Lock()
received = {"spans": [], "metric_requests": 0, "trace_requests": []}


def value(v):
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "double_value":
        return v.double_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def record_traces(request, transport, headers):
    spans = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    {
                        "resource": resource,
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "start_unix_nano": s.start_time_unix_nano,
                        "end_unix_nano": s.end_time_unix_nano,
                        "attributes": attributes(s.attributes),
                        "events": [e.name for e in s.events],
                        "status_code": s.status.code,
                    }
                )
    with lock:
        received["spans"].extend(spans)
        received["trace_requests"].append({"transport": transport, "headers": headers})


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        headers = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        record_traces(request, "grpc", headers)
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        with lock:
            received["metric_requests"] += 1
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding", "") == "gzip":
            body = gzip.decompress(body)
        if self.path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            headers = {k.lower(): v for k, v in self.headers.items()}
            record_traces(request, "http", headers)
            reply = trace_service_pb2.ExportTraceServiceResponse()
        elif self.path == "/v1/metrics":
            metrics_service_pb2.ExportMetricsServiceRequest().ParseFromString(body)
            with lock:
                received["metric_requests"] += 1
            reply = metrics_service_pb2.ExportMetricsServiceResponse()
        else:
            self.send_error(404, "no such OTLP path")
            return
        out = reply.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_):
        pass


server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
grpc_port = server.add_insecure_port("127.0.0.1:0")
server.start()
http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
threading.Thread(target=http.serve_forever, daemon=True).start()

print(json.dumps({"grpc": grpc_port, "http": http.server_address[1]}), flush=True)

stdin_closed = threading.Event()


def wait_for_stdin():
    sys.stdin.read()
    stdin_closed.set()


threading.Thread(target=wait_for_stdin, daemon=True).start()
stdin_closed.wait(args.deadline)
server.stop(grace=1).wait()
http.shutdown()
with lock:
    print(json.dumps(received), flush=True)

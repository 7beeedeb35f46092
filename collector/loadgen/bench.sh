#!/usr/bin/env bash
# Collector ingest comparison: the decode-only sink (floor), rotel (PyPI `rotel`, blackhole
# exporter) and higgsmeter-collector, each measured with higgsmeter-loadgen in one run.
#
#   collector/loadgen/bench.sh            # build, run every peer, print the table
#
# Environment (defaults in brackets):
#   CARGO_TARGET_DIR [target]   where release binaries are built
#   DURATION [10] WARMUP [2]    seconds measured / warm-up per run
#   RATE [100000]               points/s of the fixed-rate runs
#   CONC [8]                    requests in flight
#   REPEAT [1]                  repetitions of every load run (the table shows medians)
#   GZIP [0]                    1: also a paced gRPC run with gzip-compressed requests
#   PROTOCOLS ["grpc http"]     protocols of the max-rate runs ("" for none; paced runs use gRPC)
#   PEERS ["sink rotel rotel-otlp higgsmeter"]  (rotel-otlp: rotel forwarding over OTLP/gRPC
#                               to a decode-only sink, the issue's "forwards" figure;
#                               higgsmeter-traces: higgsmeter with a traces pipeline
#                               forwarding over OTLP/gRPC to a decode-only sink)
#   TRACES_RATES [0]            higgsmeter-traces: spans/s sent alongside each max-rate
#                               metrics run (one configuration per value, interleaved with
#                               the other peers; 0: the pipeline, no traces)
#   TRACES_ARGS ["--spans-per-request 100 --span-attributes 4 --traces-concurrency 4"]
#                               loadgen arguments of the traces load
#   TRACES_COMPRESSION [gzip]   higgsmeter-traces: its exporter's compression (gzip|none)
#   PACED [1]                   0: skip the fixed-rate runs
#   RENDER [1]                  0: skip the /metrics render runs
#   ROTEL_BIN                   rotel-agent binary (default: found in /tmp/rotel-venv,
#                               installed there with pip if absent)
#   COLLECTOR_BIN               a prebuilt higgsmeter-collector (default: built here)
#   COLLECTOR_ARGS              extra arguments for higgsmeter-collector
#
# Every load is bounded (warm-up + duration, `timeout` around each process), all traffic
# stays on 127.0.0.1, every peer is stopped after its run. Total < 5 minutes once built.
set -euo pipefail

cd "$(dirname "$0")/../.."
TARGET_DIR=${CARGO_TARGET_DIR:-target}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
RATE=${RATE:-100000}
CONC=${CONC:-8}
PROTOCOLS=${PROTOCOLS-grpc http}
PEERS=${PEERS:-sink rotel rotel-otlp higgsmeter}
TRACES_RATES=${TRACES_RATES:-0}
TRACES_ARGS=${TRACES_ARGS:---spans-per-request 100 --span-attributes 4 --traces-concurrency 4}
TRACES_COMPRESSION=${TRACES_COMPRESSION:-gzip}
RUN_LIMIT=$((WARMUP + DURATION + 45))
OUT=$(mktemp -d /tmp/higgsmeter-bench.XXXXXX)
START=$(date +%s)

echo "== build (release)" >&2
cargo build --release -q -p higgsmeter-loadgen
LG="$TARGET_DIR/release/higgsmeter-loadgen"
HM=""
if [[ " $PEERS " == *" higgsmeter "* || " $PEERS " == *" higgsmeter-traces "* ]]; then
    if [[ -n ${COLLECTOR_BIN:-} ]]; then
        HM=$COLLECTOR_BIN
    elif [[ -f collector/src/main.rs ]] && ! grep -q '^fn main() {}' collector/src/main.rs; then
        cargo build --release -q -p higgsmeter-collector && HM="$TARGET_DIR/release/higgsmeter-collector"
    else
        echo "higgsmeter-collector: not built yet (collector/src/main.rs is a placeholder); skipped" >&2
    fi
fi

# A collector that keeps state (--storage) gets a fresh directory per run: state restored
# from an earlier run would pre-load its series. It checkpoints on its defaults (5 s).
fresh_state() {
    if [[ -n "$HM" ]] && "$HM" --help 2>/dev/null | grep -q -- '--storage'; then
        echo "--storage $(mktemp -d "$OUT/state.XXXXXX")"
    fi
}

ROTEL=""
if [[ " $PEERS " == *" rotel"* ]]; then
    ROTEL=${ROTEL_BIN:-$(ls /tmp/rotel-venv/lib/python3*/site-packages/rotel/rotel-agent 2>/dev/null | head -1 || true)}
    if [[ -z "$ROTEL" ]]; then
        echo "== installing rotel into /tmp/rotel-venv (PyPI)" >&2
        timeout 180 python3 -m venv /tmp/rotel-venv
        timeout 180 /tmp/rotel-venv/bin/pip install -q rotel
        ROTEL=$(ls /tmp/rotel-venv/lib/python3*/site-packages/rotel/rotel-agent | head -1)
    fi
fi

# Free loopback ports, asked from the kernel.
ports() {
    python3 -c 'import socket
socks=[socket.socket() for _ in range('"$1"')]
[s.bind(("127.0.0.1",0)) for s in socks]
print(" ".join(str(s.getsockname()[1]) for s in socks))'
}

# traces_config UPSTREAM_PORT -> a config file: metrics to Prometheus only (as the plain
# peer), traces forwarded over OTLP/gRPC to a decode-only sink on UPSTREAM_PORT.
traces_config() {
    local f="$OUT/traces.$1.yaml"
    cat >"$f" <<YAML
exporters:
  prometheus: {}
  otlp:
    endpoint: http://127.0.0.1:$1
    compression: $TRACES_COMPRESSION
service:
  pipelines:
    metrics: {exporters: [prometheus]}
    traces: {receivers: [otlp], processors: [batch], exporters: [otlp]}
YAML
    echo "$f"
}

# peer_cmd LABEL GRPC_PORT HTTP_PORT PROM_PORT [UPSTREAM_PORT] -> command line of the peer
peer_cmd() {
    case "$1" in
    sink) echo "$LG --sink 127.0.0.1:$2 --sink-http 127.0.0.1:$3 --sink-for $RUN_LIMIT" ;;
    rotel-otlp) echo "$ROTEL start --exporter otlp --otlp-exporter-endpoint http://127.0.0.1:$4 --otlp-grpc-endpoint 127.0.0.1:$2 --otlp-http-endpoint 127.0.0.1:$3 --otlp-grpc-max-recv-msg-size-mib 16 --pid-file $OUT/rotel.pid --log-file $OUT/rotel.log" ;;
    rotel) echo "$ROTEL start --exporter blackhole --otlp-grpc-endpoint 127.0.0.1:$2 --otlp-http-endpoint 127.0.0.1:$3 --otlp-grpc-max-recv-msg-size-mib 16 --pid-file $OUT/rotel.pid --log-file $OUT/rotel.log" ;;
    higgsmeter) echo "$HM --grpc 127.0.0.1:$2 --http 127.0.0.1:$3 --prometheus 127.0.0.1:$4 $(fresh_state) ${COLLECTOR_ARGS:-}" ;;
    higgsmeter-traces) echo "$HM --config $(traces_config "$5") --grpc 127.0.0.1:$2 --http 127.0.0.1:$3 --prometheus 127.0.0.1:$4 $(fresh_state) ${COLLECTOR_ARGS:-}" ;;
    esac
}

# run LABEL PROTOCOL [loadgen args...]: one fresh peer process, one measured run, one JSON line.
run() {
    local label=$1 proto=$2
    shift 2
    read -r g h p u < <(ports 4)
    local ep="http://127.0.0.1:$g"
    [[ $proto == http ]] && ep="http://127.0.0.1:$h/v1/metrics"
    echo "== $label $proto $*  (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    local fwd=""
    if [[ $label == rotel-otlp ]]; then # rotel's upstream: a decode-only sink on the third port
        timeout "$RUN_LIMIT" "$LG" --sink "127.0.0.1:$p" --sink-for "$RUN_LIMIT" 2>>"$OUT/rotel-otlp.upstream.log" &
        fwd=$!
    elif [[ $label == higgsmeter-traces ]]; then # the traces upstream: a sink on the fourth port
        timeout "$RUN_LIMIT" "$LG" --sink "127.0.0.1:$u" --sink-for "$RUN_LIMIT" 2>"$OUT/upstream.$u.log" &
        fwd=$!
    fi
    timeout "$RUN_LIMIT" "$LG" --label "$label" --protocol "$proto" --endpoint "$ep" \
        --spawn "$(peer_cmd "$label" "$g" "$h" "$p" "$u")" --spawn-log "$OUT/$label.$proto.log" \
        --concurrency "$CONC" --warmup "$WARMUP" --duration "$DURATION" --json "${@//@PROM@/$p}" \
        >>"$OUT/results.jsonl" || echo "   (run failed: see $OUT/$label.$proto.log)" >&2
    if [[ -n $fwd ]]; then
        kill "$fwd" 2>/dev/null || true
        wait "$fwd" 2>/dev/null || true
    fi
    if [[ $label == higgsmeter-traces ]]; then
        echo "$proto $*: $(grep received "$OUT/upstream.$u.log" || echo 'nothing reported')" >>"$OUT/higgsmeter-traces.upstream.log"
    fi
}

# Peers interleaved per scenario (and per repetition), so that noise from other work on
# the machine spreads over all of them instead of hitting one peer's block of runs.
LIVE_PEERS=""
for peer in $PEERS; do
    [[ $peer == rotel* && -z "$ROTEL" ]] && continue
    [[ $peer == higgsmeter* && -z "$HM" ]] && continue
    LIVE_PEERS="$LIVE_PEERS $peer"
done
for rep in $(seq 1 "${REPEAT:-1}"); do
    for proto in $PROTOCOLS; do
        for peer in $LIVE_PEERS; do
            if [[ $peer == higgsmeter-traces ]]; then
                # shellcheck disable=SC2086 # TRACES_ARGS is a list of arguments
                for tr in $TRACES_RATES; do run "$peer" "$proto" --traces-rate "$tr" $TRACES_ARGS; done
            else
                run "$peer" "$proto"
            fi
        done
    done
    [[ ${PACED:-1} == 1 ]] || continue
    for peer in $LIVE_PEERS; do
        if [[ $peer == higgsmeter-traces ]]; then
            # shellcheck disable=SC2086 # TRACES_ARGS is a list of arguments
            for tr in $TRACES_RATES; do run "$peer" grpc --rate "$RATE" --traces-rate "$tr" $TRACES_ARGS; done
        else
            run "$peer" grpc --rate "$RATE"
        fi
    done
    if [[ ${GZIP:-0} == 1 ]]; then
        for peer in $LIVE_PEERS; do run "$peer" grpc --rate "$RATE" --gzip; done
    fi
done

# /metrics render of 100k series: 500 workers x 200 series, one round, then 10 GETs each.
# (a) 100k counter series with a per-worker attribute: 100k Prometheus samples on /metrics;
# (b) the default half-histogram mix with a per-worker attribute (each histogram is 13 samples);
# (c) the default mix on the per-source view /metrics/sources.
if [[ -n "$HM" && " $PEERS " == *" higgsmeter "* && ${RENDER:-1} == 1 ]]; then
    run higgsmeter grpc --workers 500 --series 200 --rounds 1 --unique-per-worker --histogram-percent 0 \
        --scrape "http://127.0.0.1:@PROM@/metrics" --scrape-count 10
    run higgsmeter grpc --workers 500 --series 200 --rounds 1 --unique-per-worker \
        --scrape "http://127.0.0.1:@PROM@/metrics" --scrape-count 10
    run higgsmeter grpc --workers 500 --series 200 --rounds 1 \
        --scrape "http://127.0.0.1:@PROM@/metrics/sources" --scrape-count 10
fi

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
load_rows = [r for r in rows if not r.get("scrape")]
def traces_rate(r):
    t = r.get("traces")
    return t["target_spans_per_s"] if t else (0.0 if r["label"] == "higgsmeter-traces" else None)
def key(r): return (r["protocol"] + ("+gzip" if r.get("gzip") else ""), r["target_rate"], traces_rate(r))
def tgt(r, k): return ((r.get("usage") or {}).get("target") or {}).get(k)
def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None
groups = {}
for r in load_rows:
    groups.setdefault((r["label"],) + key(r), []).append(r)
summary = {}
for (label, proto, rate, trate), rs in groups.items():
    summary[(label, proto, rate, trate)] = {
        "n": len(rs),
        "pps": med([r["accepted_points_per_s"] for r in rs]),
        "runs": [r["accepted_points_per_s"] for r in rs],
        "spans": med([(r.get("traces") or {}).get("accepted_spans_per_s") for r in rs]),
        "refused": sum((r.get("traces") or {}).get("spans_refused", 0) for r in rs),
        "ppc": med([r["accepted_points_per_s"] / (tgt(r, "cpu_percent") / 100) if tgt(r, "cpu_percent") else None for r in rs]),
        "p50": med([r["latency_p50_ms"] for r in rs]),
        "p99": med([r["latency_p99_ms"] for r in rs]),
        "cpu": med([tgt(r, "cpu_percent") for r in rs]),
        "rss": med([tgt(r, "rss_mib") for r in rs]),
        "rss_max": med([tgt(r, "rss_max_mib") for r in rs]),
        "lg": med([(r.get("usage") or {}).get("loadgen_cpu_percent") for r in rs]),
        "other": med([(r.get("usage") or {}).get("other_cpu_percent") for r in rs]),
        "load": " / ".join(r["loadavg_at_start"].split()[0] for r in rs),
    }
def f(v, fmt): return "n/a" if v is None else fmt.format(v)
print("| peer | protocol | load | accepted points/s | vs rotel | points per target CPU-second | p50 / p99 ms | target CPU % | target RSS MiB (max) | loadgen CPU % | other CPU % | load avg (1 min) |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for (label, proto, rate, trate), s in summary.items():
    if label == "higgsmeter-traces":
        continue
    ref = summary.get(("rotel", proto, rate, None))
    ratio = ""
    if ref and label != "rotel":
        if rate is None and ref["pps"]:
            ratio = f'{s["pps"] / ref["pps"]:.2f}x'
        elif rate is not None and ref["cpu"] and s["cpu"] is not None:
            ratio = f'CPU {s["cpu"] / ref["cpu"]:.2f}x'
    load = "max" if rate is None else f"{rate:.0f}/s"
    n = "" if s["n"] == 1 else f' (median of {s["n"]})'
    print(f'| {label} | {proto} | {load} | {s["pps"]:,.0f}{n} | {ratio} | {f(s["ppc"], "{:,.0f}")} | '
          f'{f(s["p50"], "{:.1f}")} / {f(s["p99"], "{:.1f}")} | {f(s["cpu"], "{:.0f}")} | '
          f'{f(s["rss"], "{:.1f}")} ({f(s["rss_max"], "{:.1f}")}) | {f(s["lg"], "{:.0f}")} | {f(s["other"], "{:.0f}")} | {s["load"]} |')
traces_rows = [(k, s) for k, s in summary.items() if k[0] == "higgsmeter-traces"]
if traces_rows:
    print("\n| configuration | metrics protocol | accepted points/s (median) | runs | vs no traces pipeline | collector CPU % | collector CPU % per 100k points/s | spans/s accepted (median) | spans refused (all runs) | loadgen CPU % | other CPU % | load avg (1 min) |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for proto, rate in dict.fromkeys((k[1], k[2]) for k, _ in traces_rows):
        base = summary.get(("higgsmeter", proto, rate, None))
        rows_p = ([(("higgsmeter", proto, rate, None), base)] if base else []) + sorted(
            [(k, s) for k, s in traces_rows if k[1] == proto and k[2] == rate], key=lambda ks: ks[0][3])
        for (label, _, _, trate), s in rows_p:
            name = "no traces pipeline" if label == "higgsmeter" else (
                "pipeline, no traces" if not trate else f"pipeline, {trate:,.0f} spans/s")
            name += "" if rate is None else f" (metrics paced at {rate:,.0f}/s)"
            ratio = f'{s["pps"] / base["pps"]:.2f}x' if base and base["pps"] else ""
            per100k = s["cpu"] / (s["pps"] / 1e5) if s["cpu"] and s["pps"] else None
            runs = " / ".join(f"{v / 1e6:.2f}M" for v in s["runs"])
            print(f'| {name} | {proto} | {s["pps"]:,.0f} | {runs} | {ratio} | {f(s["cpu"], "{:.0f}")} | '
                  f'{f(per100k, "{:.1f}")} | {f(s["spans"], "{:,.0f}")} | {s["refused"] if trate else ""} | '
                  f'{f(s["lg"], "{:.0f}")} | {f(s["other"], "{:.0f}")} | {s["load"]} |')
for r in rows:
    s = r.get("scrape")
    if s:
        print(f'\n{r["label"]}: GET {s["url"]} after {r["workers"]}x{r["series"]} series '
              f'({r["histogram_percent"]}% histograms{", per-worker attribute" if r["unique_per_worker"] else ""}): status {s["status"]}, '
              f'{s["bytes"]} bytes, {s["samples"]} samples; min {s["min_ms"]:.1f} ms, median {s["median_ms"]:.1f} ms, '
              f'max {s["max_ms"]:.1f} ms; target CPU {f(s.get("target_cpu_ms_per_get"), "{:.0f}")} ms per GET, '
              f'RSS after {f(s.get("target_rss_after_mib"), "{:.0f}")} MiB (load avg {r["loadavg_at_start"]})')
EOF
if [[ -f $OUT/higgsmeter-traces.upstream.log ]]; then
    echo "higgsmeter-traces upstream sink, per run (spans the collector forwarded, warm-up included):" >&2
    cat "$OUT/higgsmeter-traces.upstream.log" >&2
fi
if [[ -f $OUT/rotel-otlp.upstream.log ]]; then
    echo "rotel-otlp upstream sink, per run (points rotel actually forwarded):" >&2
    grep received "$OUT/rotel-otlp.upstream.log" >&2 || true
fi
echo "(raw results: $OUT/results.jsonl; total $(($(date +%s) - START)) s)" >&2

#!/usr/bin/env bash
# Soak: SOURCES simulated sources x SERIES series, one round a second (cumulative sums and
# histograms), for DURATION seconds, through one agent -> a gateway -> Prometheus remote
# write (a real Prometheus with --web.enable-remote-write-receiver). Reports the agent's and
# the gateway's RSS after the warm-up and at the end (and the agent's every 3.3 s in
# between: min, median, max), what either refused, and the counter
# totals at the agent, the gateway and in Prometheus once the load has stopped (they must
# be equal: nothing lost).
#
#   collector/loadgen/soak.sh                       # 2,000 x 50 for 30 s + 570 s (the issue's 10 minutes)
#   DURATION=60 collector/loadgen/soak.sh           # a short one
#
# Environment (defaults in brackets): CARGO_TARGET_DIR [target], SOURCES [2000],
# SERIES [50], DURATION [570], WARMUP [30] (the load generator caps the two at 600 s), PROMETHEUS [/usr/bin/prometheus].
# Bounded (timeouts around every process), 127.0.0.1 only; stops only what it started.
set -euo pipefail

cd "$(dirname "$0")/../.."
TARGET_DIR=${CARGO_TARGET_DIR:-target}
SOURCES=${SOURCES:-2000}
SERIES=${SERIES:-50}
DURATION=${DURATION:-570}
WARMUP=${WARMUP:-30}
PROM=${PROMETHEUS:-/usr/bin/prometheus}
OUT=$(mktemp -d /tmp/higgsmeter-soak.XXXXXX)
LIMIT=$((DURATION + WARMUP + 120))
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "== build (release)" >&2
cargo build --release -q -p higgsmeter-loadgen -p higgsmeter-collector
LG="$TARGET_DIR/release/higgsmeter-loadgen"
HM="$TARGET_DIR/release/higgsmeter-collector"

ports() {
    python3 -c 'import socket
socks=[socket.socket() for _ in range('"$1"')]
[s.bind(("127.0.0.1",0)) for s in socks]
print(" ".join(str(s.getsockname()[1]) for s in socks))'
}
read -r PP AG AH AP GG GH GP < <(ports 7)

printf 'global:\n  scrape_interval: 15s\n' >"$OUT/prometheus.yml"
timeout "$LIMIT" "$PROM" --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/tsdb" \
    --web.listen-address="127.0.0.1:$PP" --web.enable-remote-write-receiver --log.level=warn \
    >"$OUT/prometheus.log" 2>&1 &
PIDS+=($!)

# The process `timeout` runs (what to measure), by its parent's PID.
child_of() {
    for _ in $(seq 50); do
        local c
        c=$(pgrep -P "$1" | head -1 || true)
        [[ -n $c ]] && { echo "$c"; return; }
        sleep 0.1
    done
    echo "$1"
}

cat >"$OUT/gateway.yaml" <<EOF
processors:
  higgsmeter: {stale_after: 30s}
exporters:
  prometheus: {endpoint: "127.0.0.1:$GP"}
  prometheusremotewrite: {endpoint: "http://127.0.0.1:$PP/api/v1/write", interval: 5s}
EOF
# The agent on its default limits (a 1 GiB series budget: 10,000 sources x 50 series
# fit with room to spare).
cat >"$OUT/agent.yaml" <<EOF
processors:
  higgsmeter: {stale_after: 30s}
exporters:
  prometheus: {endpoint: "127.0.0.1:$AP"}
  otlp: {endpoint: "http://127.0.0.1:$GG", interval: 1s}
EOF
RUST_LOG=warn timeout "$LIMIT" "$HM" --config "$OUT/gateway.yaml" --grpc "127.0.0.1:$GG" --http "127.0.0.1:$GH" \
    --storage "$OUT/gateway-state" >"$OUT/gateway.log" 2>&1 &
PIDS+=($!)
GW=$(child_of $!)
RUST_LOG=warn timeout "$LIMIT" "$HM" --config "$OUT/agent.yaml" --grpc "127.0.0.1:$AG" --http "127.0.0.1:$AH" \
    --storage "$OUT/agent-state" >"$OUT/agent.log" 2>&1 &
PIDS+=($!)
AGENT=$(child_of $!)
for url in "http://127.0.0.1:$PP/-/ready" "http://127.0.0.1:$GP/healthz" "http://127.0.0.1:$AP/healthz"; do
    for _ in $(seq 100); do curl -sf "$url" >/dev/null && break; sleep 0.2; done
done

rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
RATE=$((SOURCES * SERIES))
echo "== load: $SOURCES sources x $SERIES series, $RATE points/s, ${WARMUP}s + ${DURATION}s (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
timeout "$LIMIT" "$LG" --label soak --protocol grpc --endpoint "http://127.0.0.1:$AG" \
    --workers "$SOURCES" --series "$SERIES" --points-per-request 1000 --rate "$RATE" \
    --warmup "$WARMUP" --duration "$DURATION" --pid "$AGENT" --json >"$OUT/load.json" &
LOAD=$!
sleep "$WARMUP"
START_AGENT=$(rss "$AGENT")
START_GW=$(rss "$GW")
# The agent's RSS every 3.3 s until the load stops (not a multiple of the 5 s
# checkpoint interval: the readings fall at every phase of it).
( while kill -0 "$LOAD" 2>/dev/null; do rss "$AGENT" >>"$OUT/agent-rss.txt" && echo >>"$OUT/agent-rss.txt"; sleep 3.3; done ) &
SAMPLER=$!
wait "$LOAD"
END_AGENT=$(rss "$AGENT")
END_GW=$(rss "$GW")
wait "$SAMPLER" 2>/dev/null || true
sleep 12 # a push (1 s) and a remote write (5 s) after the last round

# Counter totals (every loadgen counter; the collectors' own families left out).
total() {
    curl -sf "$1" | awk '/^#/ || /^higgsmeter_collector_/ {next} $1 ~ /_total(\{|$)/ {s += $NF} END {printf "%.6f", s}'
}
refused() {
    curl -sf "$1" | awk '/^higgsmeter_collector_(points|requests)_refused_total/ {s += $NF} END {print s + 0}'
}
folded() {
    curl -sf "$1" | awk '/^higgsmeter_collector_overflow_points_total/ {s += $NF} END {print s + 0}'
}
AGENT_TOTAL=$(total "http://127.0.0.1:$AP/metrics")
GW_TOTAL=$(total "http://127.0.0.1:$GP/metrics")
PROM_TOTAL=$(curl -sf "http://127.0.0.1:$PP/api/v1/query" \
    --data-urlencode 'query=sum({__name__=~".+_total",__name__!~"higgsmeter_collector_.+"})' |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print("%.6f" % float(r[0]["value"][1]) if r else "none")')

python3 - "$OUT/load.json" <<EOF
import json, sys
r = json.load(open(sys.argv[1]))
print("| | agent | gateway |")
print("|---|---|---|")
print("| RSS after warm-up (MiB) | $START_AGENT | $START_GW |")
print("| RSS at the end (MiB) | $END_AGENT | $END_GW |")
print("| refused (points + requests) | $(refused "http://127.0.0.1:$AP/metrics") | $(refused "http://127.0.0.1:$GP/metrics") |")
print("| points folded into overflow series | $(folded "http://127.0.0.1:$AP/metrics") | $(folded "http://127.0.0.1:$GP/metrics") |")
print("| counter total | $AGENT_TOTAL | $GW_TOTAL |")
print()
rss = sorted(float(x) for x in open("$OUT/agent-rss.txt").read().split())
series = $RATE
if rss:
    med = rss[len(rss) // 2]
    print("agent RSS after warm-up, %d readings every 3.3 s: min %.1f, median %.1f, max %.1f MiB "
          "(max - min = %.1f %% of the median; %.0f B a series at the median, %.0f at the max)" % (
              len(rss), rss[0], med, rss[-1], 100 * (rss[-1] - rss[0]) / med,
              med * 1048576 / series, rss[-1] * 1048576 / series))
print()
print("remote-written counter total in Prometheus: $PROM_TOTAL")
t = (r.get("usage") or {}).get("target") or {}
print("load: %.0f points/s accepted, %d requests failed, errors %s, agent CPU %s %%, agent RSS max %s MiB" % (
    r["accepted_points_per_s"], r["requests_failed"], r["errors"][:3], t.get("cpu_percent"), t.get("rss_max_mib")))
EOF
echo "(logs in $OUT; load average now $(cut -d' ' -f1-3 /proc/loadavg))" >&2

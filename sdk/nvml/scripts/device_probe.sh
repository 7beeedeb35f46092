#!/usr/bin/env bash
# Runs the NVML meter on a real GPU host for 20 s (idle: no CUDA load) and keeps what it
# printed. The device machine has no network, so build the probe here and carry it:
#
#   CARGO_TARGET_DIR=target-nvml cargo build --release -p higgsmeter-nvml --example gpu_probe
#   strip -o target-nvml/gpu_probe target-nvml/release/examples/gpu_probe
#   device run: bash sdk/nvml/scripts/device_probe.sh target-nvml/gpu_probe
#               (carry: ["target-nvml/gpu_probe"], timeout_s: 120)
#
# Output: $OUT/nvidia-smi.txt, $OUT/gpu_probe.txt (stdout and the meter's log lines).
set -uo pipefail
probe=${1:-target-nvml/gpu_probe}
out=${OUT:-/tmp/gpu_probe}
mkdir -p "$out"
{ nvidia-smi -L; nvidia-smi --query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm --format=csv; } >"$out/nvidia-smi.txt" 2>&1
cat "$out/nvidia-smi.txt"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
"$probe" 20 1000 2>&1 | tee "$out/gpu_probe.txt"
echo "gpu_probe exit status: ${PIPESTATUS[0]}"

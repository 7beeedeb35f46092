//! Runs the NVML meter for a while and prints what it exports, every 2 s (throttle
//! reasons only when active).
//!
//! ```text
//! cargo run -p higgsmeter-nvml --example gpu_probe            # 20 s, 1 s interval
//! cargo run -p higgsmeter-nvml --example gpu_probe -- 60 250  # 60 s, 250 ms interval
//! ```
//!
//! On a host without a GPU it prints the meter's error and exits with status 1. Set
//! `HIGGSMETER_NVML_LIBRARY` to try another library (the tests' fake, for instance).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use higgsmeter_nvml::NvmlMeter;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

fn main() -> anyhow::Result<()> {
    // The meter's own log lines (readings a GPU does not support, the start line).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()
        .context("seconds")?
        .unwrap_or(20);
    let interval_ms: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()
        .context("interval in ms")?
        .unwrap_or(1000);

    let exporter = InMemoryMetricExporter::default();
    let reader = PeriodicReader::builder(exporter.clone())
        .with_interval(Duration::from_secs(3600))
        .build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let meter = provider.meter("gpu_probe");

    let started = Instant::now();
    let gpus = match NvmlMeter::builder()
        .with_interval(Duration::from_millis(interval_ms))
        .with_state_source(|| "idle")
        .start(&meter)
    {
        Ok(gpus) => gpus,
        Err(e) => {
            eprintln!("gpu_probe: the NVML meter did not start: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "gpu_probe: metering {} GPU(s) for {seconds} s:",
        gpus.devices().len()
    );
    for gpu in gpus.devices() {
        println!("  index {} {} {}", gpu.index, gpu.name, gpu.uuid);
    }

    let end = started + Duration::from_secs(seconds);
    loop {
        std::thread::sleep(
            Duration::from_secs(2).min(end.saturating_duration_since(Instant::now())),
        );
        exporter.reset();
        provider.force_flush().context("flush")?;
        println!("--- t = {:.1} s", started.elapsed().as_secs_f64());
        for line in lines(&exporter)? {
            println!("{line}");
        }
        if Instant::now() >= end {
            break;
        }
    }
    gpus.stop();
    provider.shutdown().context("shutdown")?;
    Ok(())
}

/// One line per data point: `name{labels} value unit`, sorted.
fn lines(exporter: &InMemoryMetricExporter) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for resource in exporter.get_finished_metrics().context("read metrics")? {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                let mut points: Vec<(BTreeMap<String, String>, String)> = Vec::new();
                match metric.data() {
                    AggregatedMetrics::F64(data) => collect(data, &mut points),
                    AggregatedMetrics::U64(data) => collect(data, &mut points),
                    AggregatedMetrics::I64(data) => collect(data, &mut points),
                }
                for (labels, value) in points {
                    // Throttle reasons: only the active ones, to keep the output short.
                    if metric.name() == "hw.gpu.throttle" && value == "0" {
                        continue;
                    }
                    // The device labels are printed with the device list above.
                    let labels: Vec<String> = labels
                        .iter()
                        .filter(|(k, _)| !matches!(k.as_str(), "hw.type" | "hw.name" | "hw.id"))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    lines.push(format!(
                        "{}{{{}}} {value} {}",
                        metric.name(),
                        labels.join(","),
                        metric.unit()
                    ));
                }
            }
        }
    }
    lines.sort();
    Ok(lines)
}

fn collect<T: Copy + std::fmt::Display>(
    data: &MetricData<T>,
    out: &mut Vec<(BTreeMap<String, String>, String)>,
) {
    let label = |kv: &opentelemetry::KeyValue| (kv.key.to_string(), kv.value.to_string());
    match data {
        MetricData::Gauge(gauge) => {
            for p in gauge.data_points() {
                out.push((p.attributes().map(label).collect(), p.value().to_string()));
            }
        }
        MetricData::Sum(sum) => {
            for p in sum.data_points() {
                out.push((p.attributes().map(label).collect(), p.value().to_string()));
            }
        }
        _ => {}
    }
}

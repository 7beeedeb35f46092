//! The real nvml-wrapper code path against a fake `libnvidia-ml.so.1` (C, built by
//! gcc at test time), read back through an in-memory OpenTelemetry pipeline.
//!
//! The fake takes its values from `FAKE_NVML_*` environment variables, so every
//! scenario runs in a child process of this test binary with its own environment and
//! its own loaded library (see `support::run_child`).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use higgsmeter_catalog::{GPU_DEVICE_LABELS, GPU_FAMILIES, gpu_instrument_name};
use higgsmeter_nvml::{NvmlError, NvmlMeter};
use support::{
    CHILD_ENV, Pipeline, Variant, by, fake_library, fake_uuid, general_utilization, map, of,
    run_child, value,
};

/// Long enough that only `sample_now` samples during a scenario.
const NEVER: Duration = Duration::from_secs(3600);

// ---- scenarios run in a child process ------------------------------------------------

/// The entry point of a child process; does nothing in a normal test run.
#[test]
#[ignore = "runs only as the child process of a scenario test"]
fn child_entry() {
    let Ok(scenario) = std::env::var(CHILD_ENV) else {
        return;
    };
    match scenario.as_str() {
        "gauges" => gauges(),
        "not_supported" => not_supported(),
        "visible_devices" => visible_devices(),
        "no_visible_device" => no_visible_device(),
        "init_failure" => init_failure(),
        "no_shutdown" => no_shutdown(),
        "active_time_by_state" => active_time_by_state(),
        "schedule_and_stop" => schedule_and_stop(),
        "exports_read_the_snapshot" => exports_read_the_snapshot(),
        "xid_events" => xid_events(),
        other => panic!("unknown scenario {other}"),
    }
    println!("scenario {scenario} done");
}

fn start(pipeline: &Pipeline, variant: Variant) -> NvmlMeter {
    NvmlMeter::builder()
        .with_library_path(fake_library(variant))
        .with_interval(NEVER)
        .with_state_source(|| "gpu")
        .start(&pipeline.meter)
        .expect("the meter starts on the fake NVML")
}

/// Samples until `done` holds for an export (the XID thread counts on its own), at most
/// 30 s; returns that export's points.
fn collect_until(
    pipeline: &Pipeline,
    meter: &NvmlMeter,
    done: impl Fn(&[support::Point]) -> bool,
) -> Vec<support::Point> {
    collect_counting(pipeline, meter, done).0
}

/// [`collect_until`], also returning how many samples it took: one, unless the XID
/// thread was slower than the first (a loaded machine).
fn collect_counting(
    pipeline: &Pipeline,
    meter: &NvmlMeter,
    done: impl Fn(&[support::Point]) -> bool,
) -> (Vec<support::Point>, u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut samples = 0;
    loop {
        meter.sample_now();
        samples += 1;
        let points = pipeline.collect();
        if done(&points) || Instant::now() > deadline {
            return (points, samples);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn gauges() {
    let pipeline = Pipeline::new();
    let meter = start(&pipeline, Variant::Complete);
    assert_eq!(meter.devices().len(), 2);
    // The XID in the fake's event file (13 on GPU 0) arrives on the XID thread.
    let (points, sampled) = collect_counting(&pipeline, &meter, |points| {
        !of(points, "hw.gpu.xid.errors", &fake_uuid(0)).is_empty()
    });
    let (gpu0, gpu1) = (fake_uuid(0), fake_uuid(1));

    // Device labels on every point, and only the family's labels.
    for point in &points {
        let family = GPU_FAMILIES
            .iter()
            .find(|f| gpu_instrument_name(f) == Some(point.name.as_str()))
            .unwrap_or_else(|| panic!("{} is not a catalog GPU family", point.name));
        assert_eq!(point.unit, family.unit, "{}", point.name);
        let keys: Vec<&str> = point.attributes.keys().map(String::as_str).collect();
        let mut expected: Vec<&str> = family.labels.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected, "{}", point.name);
        assert_eq!(point.attributes["hw.type"], "gpu");
        assert_eq!(point.attributes["hw.name"], "NVIDIA H200");
        let index = &point.attributes["hw.gpu.index"];
        assert_eq!(
            point.attributes["hw.id"],
            fake_uuid(index.parse().expect("an index"))
        );
    }
    // Every family is exported for a GPU that supports every reading.
    for family in GPU_FAMILIES {
        let name = gpu_instrument_name(family).expect("a GPU family");
        assert!(
            !of(&points, name, &gpu0).is_empty(),
            "{name} missing for GPU 0"
        );
    }

    assert_eq!(
        by(&points, "hw.gpu.utilization", &gpu0, &["hw.gpu.task"]),
        map([("decoder", 0.34), ("encoder", 0.12), ("general", 0.42)])
    );
    assert!(
        of(&points, "hw.gpu.utilization", &gpu0)
            .iter()
            .all(|p| p.kind == "gauge")
    );
    assert_eq!(general_utilization(&points, &gpu1), Some(0.0));

    assert_eq!(value(&points, "hw.gpu.memory.usage", &gpu0), 40e9);

    // The read handle other in-process consumers use sees the same sample, and nothing
    // once the meter stops.
    let readings = meter.readings();
    let latest = readings.latest();
    assert_eq!(latest.len(), 2);
    assert_eq!(latest[0].device.uuid, gpu0);
    assert_eq!(latest[0].utilization, Some(0.42));
    assert_eq!(latest[0].memory_used, Some(40_000_000_000));
    assert_eq!(latest[1].utilization, Some(0.0));
    assert_eq!(value(&points, "hw.gpu.memory.limit", &gpu0), 80e9);
    assert_eq!(value(&points, "hw.gpu.memory.utilization", &gpu0), 0.5);
    assert_eq!(value(&points, "hw.power", &gpu0), 123.456);
    assert_eq!(value(&points, "hw.energy", &gpu0), 7500.25);
    assert_eq!(of(&points, "hw.energy", &gpu0)[0].kind, "counter");
    assert_eq!(value(&points, "hw.gpu.temperature", &gpu0), 67.0);
    assert_eq!(value(&points, "hw.gpu.clock.sm", &gpu0), 1410e6);

    let errors: BTreeMap<&str, f64> = of(&points, "hw.errors", &gpu0)
        .iter()
        .map(|p| (p.attributes["error.type"].as_str(), p.value))
        .collect();
    assert_eq!(
        errors,
        BTreeMap::from([
            ("corrected", 3.0),
            ("pcie_replay", 7.0),
            ("uncorrected", 1.0)
        ])
    );
    assert!(
        of(&points, "hw.errors", &gpu0)
            .iter()
            .all(|p| p.kind == "counter")
    );

    // 0x24 = sw_power_cap | sw_thermal_slowdown; every reason is reported.
    let throttle: BTreeMap<&str, f64> = of(&points, "hw.gpu.throttle", &gpu0)
        .iter()
        .map(|p| (p.attributes["hw.gpu.throttle.reason"].as_str(), p.value))
        .collect();
    let active: Vec<&str> = throttle
        .iter()
        .filter(|(_, v)| **v == 1.0)
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(active, vec!["sw_power_cap", "sw_thermal_slowdown"]);
    assert_eq!(
        throttle.len(),
        higgsmeter_catalog::GPU_THROTTLE_REASONS.len()
    );

    // Our PID's memory only, not the two other processes' 1 GiB each; 0 where we have
    // no context.
    assert_eq!(
        value(&points, "hw.gpu.process.memory.usage", &gpu0),
        268435456.0
    );
    assert_eq!(value(&points, "hw.gpu.process.memory.usage", &gpu1), 0.0);

    // The sample at start and each `sample_now` (one, unless the XID came late); GPU 0
    // active from the first, GPU 1 idle.
    let samples = f64::from(1 + sampled);
    assert_eq!(value(&points, "hw.gpu.session.samples", &gpu0), samples);
    assert_eq!(
        value(&points, "hw.gpu.session.utilization.peak", &gpu0),
        0.42
    );
    assert_eq!(
        value(&points, "hw.gpu.session.memory.usage.peak", &gpu0),
        40e9
    );
    assert_eq!(value(&points, "hw.gpu.session.samples", &gpu1), samples);
    assert!(of(&points, "hw.gpu.session.active_time", &gpu1).is_empty());
    assert!(of(&points, "hw.gpu.session.time_to_first_active", &gpu1).is_empty());
    let active = of(&points, "hw.gpu.session.active_time", &gpu0);
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].attributes["state"], "gpu");
    assert_eq!(active[0].kind, "counter");
    assert!(active[0].value >= 0.0);
    assert!(value(&points, "hw.gpu.session.time_to_first_active", &gpu0) >= 0.0);

    // GPU health readings (issue 22), exactly the fake's values.
    let labels = |name: &str, uuid: &str, keys: &[&str]| by(&points, name, uuid, keys);
    assert_eq!(
        labels("hw.gpu.ecc.aggregate_errors", &gpu0, &["error.type"]),
        map([("corrected", 17.0), ("uncorrected", 2.0)])
    );
    assert!(
        of(&points, "hw.gpu.ecc.aggregate_errors", &gpu0)
            .iter()
            .all(|p| p.kind == "counter")
    );
    assert_eq!(
        labels("hw.gpu.xid.errors", &gpu0, &["hw.gpu.xid.code"]),
        map([("13", 1.0)])
    );
    assert_eq!(value(&points, "hw.gpu.xid.last", &gpu0), 13.0);
    assert!(of(&points, "hw.gpu.xid.errors", &gpu1).is_empty());
    assert_eq!(value(&points, "hw.gpu.xid.last", &gpu1), 0.0);
    assert_eq!(
        labels(
            "hw.gpu.memory.retired_pages",
            &gpu0,
            &["hw.gpu.memory.retirement.cause"]
        ),
        map([("double_bit", 1.0), ("multiple_single_bit", 3.0)])
    );
    assert_eq!(
        value(&points, "hw.gpu.memory.retired_pages.pending", &gpu0),
        1.0
    );
    assert_eq!(
        labels(
            "hw.gpu.memory.remapped_rows",
            &gpu0,
            &["hw.gpu.memory.remap.cause"]
        ),
        map([("correctable", 5.0), ("uncorrectable", 1.0)])
    );
    assert_eq!(
        value(&points, "hw.gpu.memory.remapped_rows.pending", &gpu0),
        1.0
    );
    assert_eq!(
        value(&points, "hw.gpu.memory.remapped_rows.failure", &gpu0),
        0.0
    );
    assert_eq!(
        labels("hw.gpu.io", &gpu0, &["network.io.direction"]),
        map([("receive", 987654321.0), ("transmit", 123456789.0)])
    );
    assert!(
        of(&points, "hw.gpu.io", &gpu0)
            .iter()
            .all(|p| p.kind == "counter" && p.unit == "By")
    );
    assert_eq!(value(&points, "hw.gpu.pcie.link.generation", &gpu0), 4.0);
    assert_eq!(value(&points, "hw.gpu.pcie.link.width", &gpu0), 8.0);
    assert_eq!(
        labels("hw.gpu.nvlink.state", &gpu0, &["hw.gpu.nvlink.link"]),
        map([("0", 1.0), ("1", 0.0)])
    );
    // KiB from NVML, bytes exported; the fake adds the link number to its KiB.
    assert_eq!(
        labels(
            "hw.gpu.nvlink.io",
            &gpu0,
            &["hw.gpu.nvlink.link", "network.io.direction"]
        ),
        map([
            ("0/receive", 2000.0 * 1024.0),
            ("0/transmit", 1000.0 * 1024.0),
            ("1/receive", 2001.0 * 1024.0),
            ("1/transmit", 1001.0 * 1024.0),
        ])
    );
    assert_eq!(
        labels(
            "hw.gpu.nvlink.errors",
            &gpu0,
            &["hw.gpu.nvlink.link", "error.type"]
        ),
        map([
            ("0/crc", 4.0),
            ("0/recovery", 6.0),
            ("0/replay", 5.0),
            ("1/crc", 4.0),
            ("1/recovery", 6.0),
            ("1/replay", 5.0),
        ])
    );
    // The fake's memory utilisation is half the GPU's.
    assert_eq!(
        value(&points, "hw.gpu.memory.copy_utilization", &gpu0),
        0.21
    );
    assert_eq!(value(&points, "hw.gpu.memory.temperature", &gpu0), 61.0);
    assert_eq!(value(&points, "hw.gpu.memory.temperature", &gpu1), 51.0);
    assert_eq!(value(&points, "hw.gpu.clock.memory", &gpu0), 2619e6);
    assert_eq!(value(&points, "hw.gpu.power.limit", &gpu0), 650.0);
    assert_eq!(value(&points, "hw.gpu.performance_state", &gpu0), 2.0);
    assert_eq!(value(&points, "hw.gpu.fan.speed", &gpu0), 0.45);
    // The board of GPU 1 has no fan: absent, not 0.
    assert!(of(&points, "hw.gpu.fan.speed", &gpu1).is_empty());
    assert_eq!(
        labels("hw.gpu.profiling", &gpu0, &["hw.gpu.profiling.metric"]),
        map([
            ("dram_active", 0.25),
            ("graphics_active", 0.4),
            ("sm_active", 0.35),
            ("sm_occupancy", 0.2),
            ("tensor_active", 0.1),
        ])
    );
    // GPU 0 has an uncorrected volatile ECC error: failed; GPU 1 is healthy.
    assert_eq!(
        labels("hw.status", &gpu0, &["hw.state"]),
        map([("degraded", 0.0), ("failed", 1.0), ("ok", 0.0)])
    );
    assert_eq!(
        labels("hw.status", &gpu1, &["hw.state"]),
        map([("degraded", 0.0), ("failed", 0.0), ("ok", 1.0)])
    );
    drop(meter);
    assert!(readings.latest().is_empty());
}

#[test]
fn gauges_carry_the_fake_readings_and_the_device_attributes() {
    let xid_file = scratch_file("gauges-xid");
    std::fs::write(&xid_file, "0 13\n").expect("write the XID file");
    run_child(
        "gauges",
        &[
            ("FAKE_NVML_XID_FILE", &xid_file),
            ("FAKE_NVML_ECC_AGG_CORRECTED_0", "17"),
            ("FAKE_NVML_ECC_AGG_UNCORRECTED_0", "2"),
            ("FAKE_NVML_ENC_UTIL_0", "12"),
            ("FAKE_NVML_DEC_UTIL_0", "34"),
            ("FAKE_NVML_POWER_LIMIT_MW_0", "650000"),
            ("FAKE_NVML_PSTATE_0", "2"),
            ("FAKE_NVML_FANS_0", "1"),
            ("FAKE_NVML_FAN_SPEED_0", "45"),
            ("FAKE_NVML_PCIE_REPLAY_0", "7"),
            ("FAKE_NVML_PCIE_GEN_0", "4"),
            ("FAKE_NVML_PCIE_WIDTH_0", "8"),
            ("FAKE_NVML_MEM_TEMP_0", "61"),
            ("FAKE_NVML_PCIE_TX_BYTES_0", "123456789"),
            ("FAKE_NVML_PCIE_RX_BYTES_0", "987654321"),
            ("FAKE_NVML_RETIRED_SBE_0", "3"),
            ("FAKE_NVML_RETIRED_DBE_0", "1"),
            ("FAKE_NVML_RETIRED_PENDING_0", "1"),
            ("FAKE_NVML_REMAP_COR_0", "5"),
            ("FAKE_NVML_REMAP_UNC_0", "1"),
            ("FAKE_NVML_REMAP_PENDING_0", "1"),
            ("FAKE_NVML_NVLINKS", "2"),
            ("FAKE_NVML_NVLINK_DOWN_0", "1"),
            ("FAKE_NVML_NVLINK_CRC_0", "4"),
            ("FAKE_NVML_NVLINK_REPLAY_0", "5"),
            ("FAKE_NVML_NVLINK_RECOVERY_0", "6"),
            ("FAKE_NVML_DEVICE_COUNT", "2"),
            ("FAKE_NVML_UTIL_0", "42"),
            ("FAKE_NVML_UTIL_1", "0"),
            ("FAKE_NVML_MEM_USED_0", "40000000000"),
            ("FAKE_NVML_MEM_TOTAL_0", "80000000000"),
            ("FAKE_NVML_POWER_MW_0", "123456"),
            ("FAKE_NVML_ENERGY_MJ_0", "7500250"),
            ("FAKE_NVML_TEMP_0", "67"),
            ("FAKE_NVML_SM_CLOCK_MHZ", "1410"),
            ("FAKE_NVML_ECC_CORRECTED_0", "3"),
            ("FAKE_NVML_ECC_UNCORRECTED_0", "1"),
            ("FAKE_NVML_THROTTLE_0", "0x24"),
            ("FAKE_NVML_SELF_MEM_0", "268435456"),
            ("FAKE_NVML_OTHER_PROCS", "2"),
        ],
    );
    let _ = std::fs::remove_file(&xid_file);
}

/// A path for a file of this test process under the target's temporary directory.
fn scratch_file(name: &str) -> String {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}.{}", std::process::id()))
        .to_string_lossy()
        .into_owned()
}

/// The families GPU 1 leaves out in `not_supported` (every reading but memory, the SM
/// clock, the throttle reasons and processes), with the families GPU 0 reports.
const LEFT_OUT: &[&str] = &[
    "hw.gpu.temperature",
    "hw.power",
    "hw.energy",
    "hw.gpu.ecc.aggregate_errors",
    "hw.gpu.xid.errors",
    "hw.gpu.xid.last",
    "hw.gpu.memory.retired_pages",
    "hw.gpu.memory.retired_pages.pending",
    "hw.gpu.memory.remapped_rows",
    "hw.gpu.memory.remapped_rows.pending",
    "hw.gpu.memory.remapped_rows.failure",
    "hw.gpu.io",
    "hw.gpu.pcie.link.generation",
    "hw.gpu.pcie.link.width",
    "hw.gpu.nvlink.state",
    "hw.gpu.nvlink.io",
    "hw.gpu.nvlink.errors",
    "hw.gpu.memory.copy_utilization",
    "hw.gpu.memory.temperature",
    "hw.gpu.clock.memory",
    "hw.gpu.power.limit",
    "hw.gpu.performance_state",
    "hw.gpu.fan.speed",
    "hw.gpu.profiling",
];

/// A log sink for `tracing_subscriber::fmt`.
#[derive(Clone, Default)]
struct Log(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn not_supported() {
    let pipeline = Pipeline::new();
    let log = Log::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    // Start and sample on this thread, under a subscriber of this thread only.
    let _meter = tracing::subscriber::with_default(subscriber, || {
        let meter = start(&pipeline, Variant::Complete);
        // More samples: GPM gets a pair to compare, and nothing is logged twice.
        meter.sample_now();
        meter.sample_now();
        meter
    });
    let text = String::from_utf8_lossy(&log.0.lock().expect("the log")).into_owned();
    let unsupported: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("does not support"))
        .collect();
    let distinct: std::collections::BTreeSet<&str> = unsupported.iter().copied().collect();
    assert_eq!(distinct.len(), unsupported.len(), "logged twice:\n{text}");
    for what in [
        "hw.gpu.ecc.aggregate_errors",
        "hw.gpu.memory.retired_pages",
        "hw.gpu.memory.remapped_rows",
        "hw.gpu.io",
        "hw.gpu.nvlink",
        "hw.gpu.profiling",
        "hw.gpu.fan.speed",
        "hw.gpu.memory.temperature",
    ] {
        assert_eq!(
            unsupported.iter().filter(|l| l.contains(what)).count(),
            1,
            "{what} not logged once:\n{text}"
        );
    }
    assert!(
        unsupported.iter().all(|l| l.contains("GPU 1 ")),
        "only GPU 1 lacks readings:\n{text}"
    );
    let points = pipeline.collect();
    let (gpu0, gpu1) = (fake_uuid(0), fake_uuid(1));
    for name in LEFT_OUT {
        assert!(
            of(&points, name, &gpu1).is_empty(),
            "{name} reported for GPU 1: {:#?}",
            of(&points, name, &gpu1)
        );
        // hw.gpu.xid.errors has no series until an XID arrives.
        if *name != "hw.gpu.xid.errors" {
            assert!(
                !of(&points, name, &gpu0).is_empty(),
                "{name} missing for GPU 0"
            );
        }
    }
    // hw.gpu.utilization and hw.errors: every label value GPU 1 cannot read is left out.
    assert!(by(&points, "hw.gpu.utilization", &gpu1, &["hw.gpu.task"]).is_empty());
    assert_eq!(
        by(&points, "hw.gpu.utilization", &gpu0, &["hw.gpu.task"]).len(),
        3
    );
    assert!(of(&points, "hw.errors", &gpu1).is_empty());
    assert_eq!(of(&points, "hw.errors", &gpu0).len(), 3);
    // Without a utilisation reading nothing is active, nothing is peaked, nothing is
    // counted as a sample (unavailable is not idle).
    assert_eq!(value(&points, "hw.gpu.session.samples", &gpu1), 0.0);
    assert!(of(&points, "hw.gpu.session.utilization.peak", &gpu1).is_empty());
    assert!(of(&points, "hw.gpu.session.active_time", &gpu1).is_empty());
    // The supported readings of the same GPU are still there.
    assert_eq!(
        value(&points, "hw.gpu.memory.usage", &gpu1),
        2.0 * 1024.0 * 1024.0 * 1024.0
    );
    assert_eq!(value(&points, "hw.gpu.clock.sm", &gpu1), 1980e6);
    // Nothing unreadable makes a GPU unhealthy.
    assert_eq!(
        by(&points, "hw.status", &gpu1, &["hw.state"]),
        map([("degraded", 0.0), ("failed", 0.0), ("ok", 1.0)])
    );
}

#[test]
fn a_reading_a_gpu_does_not_support_is_left_out_not_zero() {
    run_child(
        "not_supported",
        &[
            ("FAKE_NVML_DEVICE_COUNT", "2"),
            ("FAKE_NVML_NVLINKS", "2"),
            ("FAKE_NVML_FANS", "1"),
            (
                "FAKE_NVML_NOT_SUPPORTED_1",
                "temperature,power,energy,ecc,util,ecc_aggregate,encoder,decoder,mem_clock,\
                 power_limit,pstate,fan,pcie_replay,pcie_link,mem_temp,pcie_bytes,\
                 retired_pages,remapped_rows,nvlink,gpm,xid",
            ),
        ],
    );
}

fn xid_events() {
    let file = std::env::var("FAKE_NVML_XID_FILE").expect("the XID file is set");
    let inject = |line: &str| {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .expect("open the XID file");
        writeln!(f, "{line}").expect("append to the XID file");
    };
    let pipeline = Pipeline::new();
    let meter = start(&pipeline, Variant::Complete);
    let (gpu0, gpu1, gpu2) = (fake_uuid(0), fake_uuid(1), fake_uuid(2));
    let points = pipeline.collect();
    // Registered, nothing yet: last 0, no counts; GPU 2 delivers no events: absent.
    assert_eq!(value(&points, "hw.gpu.xid.last", &gpu0), 0.0);
    assert_eq!(value(&points, "hw.gpu.xid.last", &gpu1), 0.0);
    assert!(of(&points, "hw.gpu.xid.last", &gpu2).is_empty());
    assert!(points.iter().all(|p| p.name != "hw.gpu.xid.errors"));

    inject("1 79");
    collect_until(&pipeline, &meter, |points| {
        !of(points, "hw.gpu.xid.errors", &fake_uuid(1)).is_empty()
    });
    // An event the set does not hold (GPU 2 is not registered) is not counted, and a
    // second XID on GPU 1 follows it: once it is counted, everything before it was seen.
    inject("2 48");
    inject("1 13");
    let points = collect_until(&pipeline, &meter, |points| {
        by(
            points,
            "hw.gpu.xid.errors",
            &fake_uuid(1),
            &["hw.gpu.xid.code"],
        )
        .contains_key("13")
    });
    assert_eq!(
        by(&points, "hw.gpu.xid.errors", &gpu1, &["hw.gpu.xid.code"]),
        map([("13", 1.0), ("79", 1.0)]),
        "each XID counted once, on GPU 1"
    );
    assert!(
        of(&points, "hw.gpu.xid.errors", &gpu1)
            .iter()
            .all(|p| p.kind == "counter")
    );
    assert_eq!(value(&points, "hw.gpu.xid.last", &gpu1), 13.0);
    assert!(of(&points, "hw.gpu.xid.errors", &gpu0).is_empty());
    assert!(of(&points, "hw.gpu.xid.errors", &gpu2).is_empty());
    assert_eq!(value(&points, "hw.gpu.xid.last", &gpu0), 0.0);
    // XID 79: fallen off the bus, failed; the others are healthy.
    assert_eq!(
        by(&points, "hw.status", &gpu1, &["hw.state"]),
        map([("degraded", 0.0), ("failed", 1.0), ("ok", 0.0)])
    );
    for gpu in [&gpu0, &gpu2] {
        assert_eq!(
            by(&points, "hw.status", gpu, &["hw.state"]),
            map([("degraded", 0.0), ("failed", 0.0), ("ok", 1.0)])
        );
    }
    // Stopping stops the XID thread too (the drop returns; the test would hang otherwise).
    drop(meter);
    assert!(pipeline.collect().is_empty());
}

#[test]
fn an_xid_event_is_counted_once_on_its_gpu_only() {
    let file = scratch_file("xid-events");
    std::fs::write(&file, "").expect("create the XID file");
    run_child(
        "xid_events",
        &[
            ("FAKE_NVML_DEVICE_COUNT", "3"),
            ("FAKE_NVML_NOT_SUPPORTED_2", "xid"),
            ("FAKE_NVML_XID_FILE", &file),
        ],
    );
    let _ = std::fs::remove_file(&file);
}

fn visible_devices() {
    let pipeline = Pipeline::new();
    let meter = start(&pipeline, Variant::Complete);
    let metered: Vec<(u32, String)> = meter
        .devices()
        .iter()
        .map(|d| (d.index, d.uuid.clone()))
        .collect();
    assert_eq!(metered, vec![(2, fake_uuid(2)), (0, fake_uuid(0))]);
    let points = pipeline.collect();
    let mut indices: Vec<&str> = points
        .iter()
        .filter(|p| p.name == "hw.gpu.utilization" && p.attributes["hw.gpu.task"] == "general")
        .map(|p| p.attributes[GPU_DEVICE_LABELS[3]].as_str())
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, vec!["0", "2"]);
    assert_eq!(general_utilization(&points, &fake_uuid(2)), Some(0.52));
}

#[test]
fn cuda_visible_devices_selects_gpus_by_uuid_and_index() {
    // Device 7 does not exist: the list ends there, as in CUDA, so 1 is not metered.
    let selection = format!("{},0,7,1", fake_uuid(2));
    run_child(
        "visible_devices",
        &[
            ("FAKE_NVML_DEVICE_COUNT", "4"),
            ("CUDA_VISIBLE_DEVICES", &selection),
        ],
    );
}

fn no_visible_device() {
    let pipeline = Pipeline::new();
    let error = NvmlMeter::builder()
        .with_library_path(fake_library(Variant::Complete))
        .start(&pipeline.meter)
        .expect_err("no GPU is visible");
    assert!(
        matches!(&error, NvmlError::NoVisibleDevice { found: 2, selection: Some(s) } if s.is_empty()),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("CUDA_VISIBLE_DEVICES"),
        "{error}"
    );
    assert!(pipeline.collect().is_empty());
}

#[test]
fn an_empty_cuda_visible_devices_is_a_clear_error() {
    run_child(
        "no_visible_device",
        &[
            ("FAKE_NVML_DEVICE_COUNT", "2"),
            ("CUDA_VISIBLE_DEVICES", ""),
        ],
    );
}

fn init_failure() {
    let pipeline = Pipeline::new();
    let error = NvmlMeter::builder()
        .with_library_path(fake_library(Variant::Complete))
        .start(&pipeline.meter)
        .expect_err("nvmlInit fails");
    assert!(matches!(error, NvmlError::Init { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("driver") && message.contains("nvidia-smi"),
        "{message}"
    );
}

#[test]
fn a_driver_that_does_not_initialise_is_a_clear_error() {
    // NVML_ERROR_DRIVER_NOT_LOADED.
    run_child("init_failure", &[("FAKE_NVML_INIT_RESULT", "9")]);
}

fn no_shutdown() {
    let pipeline = Pipeline::new();
    let meter = start(&pipeline, Variant::NoShutdown);
    meter.sample_now();
    assert_eq!(
        value(&pipeline.collect(), "hw.gpu.session.samples", &fake_uuid(0)),
        2.0
    );
    // nvml-wrapper's own Drop would panic here.
    drop(meter);
    assert!(
        pipeline.collect().is_empty(),
        "a stopped meter reports nothing"
    );
}

#[test]
fn a_library_without_nvml_shutdown_does_not_panic_on_stop() {
    run_child("no_shutdown", &[]);
}

fn active_time_by_state() {
    let pipeline = Pipeline::new();
    let states = ["startup", "io", "gpu", "gpu", "cpu"];
    let at = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&at);
    let started = Instant::now();
    let meter = NvmlMeter::builder()
        .with_library_path(fake_library(Variant::Complete))
        .with_interval(NEVER)
        .with_state_source(move || states[seen.load(Ordering::SeqCst)])
        .start(&pipeline.meter)
        .expect("the meter starts");
    for i in 1..states.len() {
        std::thread::sleep(Duration::from_millis(20));
        at.store(i, Ordering::SeqCst);
        meter.sample_now();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let points = pipeline.collect();
    let (busy, idle) = (fake_uuid(0), fake_uuid(1));
    let by_state: BTreeMap<&str, f64> = of(&points, "hw.gpu.session.active_time", &busy)
        .iter()
        .map(|p| (p.attributes["state"].as_str(), p.value))
        .collect();
    // Each interval goes to the state at its end: the first sample, taken as the meter
    // started, saw "startup".
    let states_seen: Vec<&str> = by_state.keys().copied().collect();
    assert_eq!(states_seen, vec!["cpu", "gpu", "io", "startup"]);
    assert!(by_state["io"] > 0.0 && by_state["gpu"] > 0.0 && by_state["cpu"] > 0.0);
    // Measured intervals: the active total is the time from the first sample to the
    // last, which is within what the test measured around it.
    let total: f64 = by_state.values().sum();
    assert!(
        total > 0.0 && total <= elapsed,
        "active {total} s of {elapsed} s"
    );
    assert_eq!(
        value(&points, "hw.gpu.session.samples", &busy),
        states.len() as f64
    );
    // Active from the first sample, taken as the meter started.
    let first_active = value(&points, "hw.gpu.session.time_to_first_active", &busy);
    assert!((0.0..=elapsed).contains(&first_active), "{first_active} s");
    // The GPU below the threshold (5 %, strictly above counts) is never active.
    assert!(of(&points, "hw.gpu.session.active_time", &idle).is_empty());
    assert_eq!(
        value(&points, "hw.gpu.session.utilization.peak", &idle),
        0.05
    );
}

#[test]
fn gpu_active_time_is_split_by_the_worker_state_at_sampling_time() {
    run_child(
        "active_time_by_state",
        &[
            ("FAKE_NVML_DEVICE_COUNT", "2"),
            ("FAKE_NVML_UTIL_0", "90"),
            ("FAKE_NVML_UTIL_1", "5"),
        ],
    );
}

fn schedule_and_stop() {
    let pipeline = Pipeline::new();
    let meter = NvmlMeter::builder()
        .with_library_path(fake_library(Variant::Complete))
        .with_interval(Duration::from_millis(10))
        .start(&pipeline.meter)
        .expect("the meter starts");
    // The thread samples on its own; wait (bounded) until it has, without asserting
    // how fast.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut samples = 0.0;
    while samples < 5.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        samples = value(&pipeline.collect(), "hw.gpu.session.samples", &fake_uuid(0));
    }
    assert!(
        samples >= 5.0,
        "the sampler thread took {samples} samples in 30 s"
    );
    let points = pipeline.collect();
    let active = of(&points, "hw.gpu.session.active_time", &fake_uuid(0));
    assert_eq!(active.len(), 1);
    assert_eq!(
        active[0].attributes["state"], "unknown",
        "no state source was set"
    );
    meter.stop();
    assert!(
        pipeline.collect().is_empty(),
        "a stopped meter reports nothing"
    );
}

#[test]
fn the_sampler_thread_samples_on_its_own_and_stops_on_drop() {
    run_child("schedule_and_stop", &[]);
}

fn exports_read_the_snapshot() {
    let log = std::env::var("FAKE_NVML_CALL_LOG").expect("the call log is set");
    let calls = || std::fs::read_to_string(&log).unwrap_or_default();
    let pipeline = Pipeline::new();
    let meter = start(&pipeline, Variant::Complete);
    // The first sample, taken by start(): one utilisation call per GPU.
    assert_eq!(calls(), "0\n1\n");
    for _ in 0..5 {
        assert_eq!(
            general_utilization(&pipeline.collect(), &fake_uuid(1)),
            Some(0.51)
        );
    }
    assert_eq!(calls(), "0\n1\n", "an export called NVML");
    meter.sample_now();
    meter.sample_now();
    assert_eq!(calls(), "0\n1\n0\n1\n0\n1\n");
    let points = pipeline.collect();
    assert_eq!(value(&points, "hw.gpu.session.samples", &fake_uuid(0)), 3.0);
}

#[test]
fn exports_read_the_last_sample_and_never_call_nvml() {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fake_nvml_calls.{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let log_path = log.to_string_lossy().into_owned();
    run_child(
        "exports_read_the_snapshot",
        &[
            ("FAKE_NVML_DEVICE_COUNT", "2"),
            ("FAKE_NVML_CALL_LOG", &log_path),
        ],
    );
    let _ = std::fs::remove_file(&log);
}

// ---- in-process: nothing loaded, nothing to isolate ------------------------------------

#[test]
fn an_absent_library_is_a_clear_error() {
    let pipeline = Pipeline::new();
    let missing =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such/libnvidia-ml.so.1");
    let error = NvmlMeter::builder()
        .with_library_path(&missing)
        .start(&pipeline.meter)
        .expect_err("there is no library");
    assert!(
        matches!(&error, NvmlError::LibraryNotLoaded { path, .. } if *path == missing),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("HIGGSMETER_NVML_LIBRARY") && message.contains("driver"),
        "{message}"
    );
    assert!(pipeline.collect().is_empty());
}

#[test]
fn a_library_that_is_not_nvml_is_a_clear_error() {
    let pipeline = Pipeline::new();
    let error = NvmlMeter::builder()
        .with_library_path(fake_library(Variant::NoInit))
        .start(&pipeline.meter)
        .expect_err("the library has no nvmlInit_v2");
    assert!(
        matches!(&error, NvmlError::MissingSymbol { symbol, .. } if symbol.contains("nvmlInit_v2")),
        "{error:?}"
    );
}

#[test]
fn settings_out_of_range_are_refused_before_loading_anything() {
    let pipeline = Pipeline::new();
    let missing = "/nonexistent/libnvidia-ml.so.1";
    for builder in [
        NvmlMeter::builder().with_interval(Duration::ZERO),
        NvmlMeter::builder().with_active_threshold(120.0),
        NvmlMeter::builder().with_active_threshold(f64::NAN),
    ] {
        let error = builder
            .with_library_path(missing)
            .start(&pipeline.meter)
            .expect_err("refused");
        assert!(
            matches!(error, NvmlError::InvalidSetting { .. }),
            "{error:?}"
        );
    }
}

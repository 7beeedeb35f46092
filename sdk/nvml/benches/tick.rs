//! CPU cost of one NVML sampling tick for 8 GPUs with every reading on, against the fake
//! `libnvidia-ml.so.1` (the real nvml-wrapper path: 8 handles; per GPU 24 NVML calls,
//! one batched field-value call with 10 device fields and 6 per NVLink link for 18 links,
//! and a GPM sample pair; the snapshot update; the XID thread registered and waiting),
//! and of one export of the GPU instruments through an in-memory SDK pipeline.
//!
//! `cargo bench -p higgsmeter-nvml --bench tick`

#![allow(missing_docs, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use higgsmeter_nvml::NvmlMeter;
use support::{Pipeline, Variant, fake_library};

fn benches(c: &mut Criterion) {
    let pipeline = Pipeline::new();
    let meter = NvmlMeter::builder()
        .with_library_path(fake_library(Variant::Complete))
        // Only the benchmark samples.
        .with_interval(Duration::from_secs(3600))
        .with_state_source(|| "gpu")
        .start(&pipeline.meter)
        .expect("the meter starts on the fake NVML");
    assert_eq!(meter.devices().len(), 8);

    let mut group = c.benchmark_group("nvml");
    group.bench_function("tick_8_gpus", |b| b.iter(|| meter.sample_now()));
    group.bench_function("export_8_gpus", |b| {
        b.iter(|| black_box(pipeline.collect().len()))
    });
    group.finish();
}

fn main() {
    // The fake reads its configuration from the environment at call time.
    #[allow(unsafe_code, reason = "set_var before any other thread exists")]
    // SAFETY: nothing else runs yet: criterion and the meter start no thread before this.
    unsafe {
        std::env::set_var("FAKE_NVML_DEVICE_COUNT", "8");
        std::env::set_var("FAKE_NVML_SELF_MEM", "1073741824");
        std::env::set_var("FAKE_NVML_OTHER_PROCS", "3");
        // Everything on: an SXM board's 18 NVLink links, a fan, GPM (the fake's default),
        // XID events (registered; none arrive).
        std::env::set_var("FAKE_NVML_NVLINKS", "18");
        std::env::set_var("FAKE_NVML_FANS", "1");
        std::env::remove_var("CUDA_VISIBLE_DEVICES");
    }
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
}

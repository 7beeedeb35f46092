//! The collector's normal dependencies hold neither the worker SDK nor any
//! OpenTelemetry SDK or Prometheus client crate (dev-dependencies may): the collector
//! only needs the catalog and the OTLP types (ADR 6).
#![allow(clippy::unwrap_used, reason = "test code")]

use std::process::Command;

#[test]
fn normal_dependencies_hold_no_sdk() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", "higgsmeter-collector", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.contains("higgsmeter-catalog "), "{tree}");
    for banned in [
        "higgsmeter ",
        "opentelemetry_sdk ",
        "opentelemetry-otlp ",
        "opentelemetry-prometheus ",
        "prometheus ",
    ] {
        assert!(
            !tree.lines().any(|l| l.starts_with(banned)),
            "the collector's normal dependencies hold {banned}:\n{tree}"
        );
    }
}

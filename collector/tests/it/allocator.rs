//! The binary's allocator is lean by default (`collector/src/allocator.rs`): started
//! without mimalloc's options in its environment, the running collector has
//! `MIMALLOC_ARENA_EAGER_COMMIT=0` in its own (it ran itself again with it, as its
//! process id shows) and nothing else of mimalloc's; an operator's own value is kept.
//! What they save is measured, not asserted here (BENCHMARKS.md, *Footprint*).

use std::collections::BTreeMap;

use crate::support::*;

/// The environment of a started collector (`set`: variables the test gives it).
fn environment_of_a_collector(set: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut collector = CollectorProcess::builder()
        .args(["--storage", "none"])
        .env_remove("MIMALLOC_PURGE_DELAY")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
        .env("RUST_LOG", "warn");
    for (k, v) in set {
        collector = collector.env(k, v);
    }
    // Started: it printed its listening line.
    let collector = collector.start();
    // The process id is the one started: `exec` kept it.
    let environ = std::fs::read(format!("/proc/{}/environ", collector.pid())).expect("environ");
    drop(collector);
    environ
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .filter(|(k, _)| k.starts_with("MIMALLOC_"))
        .collect()
}

#[test]
fn the_binary_runs_with_the_lean_allocator_options_unless_told_otherwise() {
    let arena = |env: &BTreeMap<String, String>| env.get("MIMALLOC_ARENA_EAGER_COMMIT").cloned();
    let lean = environment_of_a_collector(&[]);
    assert_eq!(arena(&lean).as_deref(), Some("0"));
    assert_eq!(lean.len(), 1, "only arena_eager_commit is set: {lean:?}");
    let own = environment_of_a_collector(&[
        ("MIMALLOC_ARENA_EAGER_COMMIT", "1"),
        ("MIMALLOC_PURGE_DELAY", "250"),
    ]);
    assert_eq!(arena(&own).as_deref(), Some("1"));
    assert_eq!(
        own.get("MIMALLOC_PURGE_DELAY").map(String::as_str),
        Some("250")
    );
}

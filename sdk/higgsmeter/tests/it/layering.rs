//! The SDK's modules depend on each other in one direction only: this reads every
//! top-level module's `crate::NAME` paths (the reader is shared with the collector's
//! layering test, `tests/shared/module_graph.rs`) and fails on a cycle, naming it.
//! `settings` (every variable resolved once) uses nothing of the crate but `error`;
//! `pipeline` (the trait every pipeline implements) nothing at all.
//!
//! The same check runs over every library crate of the SDK (`sdk/*/src`): each crate's
//! top-level modules have no cycle either.

#[path = "../../../../tests/shared/module_graph.rs"]
mod module_graph;

use std::path::Path;

use module_graph::{cycle, cycles, graph, graph_of};

#[test]
fn the_sdk_s_modules_have_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    // The reader sees what the modules use (a reader that saw nothing would pass).
    assert!(graph["telemetry"].contains("settings"), "{graph:#?}");
    assert!(graph["traces"].contains("otlp"), "{graph:#?}");
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "import cycles between top-level modules: {cycles:?}\n{graph:#?}"
    );
    let only_error = ["error".to_owned()].into_iter().collect();
    assert_eq!(graph["settings"], only_error, "settings is a leaf");
    assert!(graph["pipeline"].is_empty(), "{:?}", graph["pipeline"]);
    // No pipeline reaches back into the wiring that starts it.
    for pipeline in ["otlp", "prom", "traces", "gpu", "meter", "off"] {
        assert!(
            !graph[pipeline].contains("telemetry"),
            "{pipeline} uses telemetry"
        );
    }
}

/// Every crate under `sdk/` with a `src` folder, and edges its reader must see (a reader
/// that saw nothing would pass). The catalog's family groups use only the crate root's
/// types (`Family`, `Kind`, `Fleet`), never each other: it has no edge to see, so its
/// modules are listed instead, and each must stay a leaf.
const SDK_CRATES: &[(&str, &[(&str, &str)])] = &[
    ("catalog", &[]),
    (
        "higgsmeter",
        &[("telemetry", "settings"), ("traces", "otlp")],
    ),
    ("macros", &[("expand", "attr")]),
    (
        "nvml",
        &[
            ("meter", "instruments"),
            ("instruments", "health"),
            ("health", "sampler"),
            ("health", "xid"),
            ("sampler", "xid"),
        ],
    ),
    ("python", &[("tracker", "states"), ("pipeline", "traces")]),
    (
        "session",
        &[
            ("agent", "instruments"),
            ("agent", "shared"),
            ("instruments", "shared"),
            ("shared", "counters"),
        ],
    ),
];

/// The catalog's family groups, each a leaf.
const CATALOG_MODULES: &[&str] = &[
    "activity",
    "collector",
    "engine",
    "gpu",
    "job",
    "session",
    "state",
];

#[test]
fn every_sdk_crate_s_modules_have_no_import_cycle() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("sdk/")
        .to_path_buf();
    // Every crate of the SDK is checked: a new one must be added to the table.
    let mut on_disk: Vec<String> = std::fs::read_dir(&sdk)
        .expect("read sdk/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.join("src").is_dir())
        .filter_map(|path| Some(path.file_name()?.to_str()?.to_owned()))
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = SDK_CRATES.iter().map(|(name, _)| *name).collect();
    assert_eq!(on_disk, listed, "sdk/ crates and SDK_CRATES differ");

    let mut failures = Vec::new();
    for (name, edges) in SDK_CRATES {
        let graph = graph(&sdk.join(name).join("src"));
        for (from, to) in *edges {
            if !graph.get(*from).is_some_and(|uses| uses.contains(*to)) {
                failures.push(format!(
                    "sdk/{name}: the reader misses {from} -> {to}\n{graph:#?}"
                ));
            }
        }
        for cycle in cycles(&graph) {
            failures.push(format!("sdk/{name}: import cycle {}", cycle.join(" -> ")));
        }
        if *name == "catalog" {
            let modules: Vec<&str> = graph.keys().map(String::as_str).collect();
            assert_eq!(modules, CATALOG_MODULES, "sdk/catalog's modules");
            for (module, uses) in &graph {
                if !uses.is_empty() {
                    failures.push(format!("sdk/catalog: {module} uses {uses:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let graph = graph_of(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
    assert_eq!(
        cycle(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle(&graph, "d"), None);
}

//! The SDK's modules depend on each other in one direction only: this reads every
//! top-level module's `crate::NAME` paths (the reader is shared with the collector's
//! layering test, `tests/shared/module_graph.rs`) and fails on a cycle, naming it.
//! `settings` (every variable resolved once) uses nothing of the crate but `error`;
//! `pipeline` (the trait every pipeline implements) nothing at all.

#[path = "../../../tests/shared/module_graph.rs"]
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

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let graph = graph_of(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
    assert_eq!(
        cycle(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle(&graph, "d"), None);
}

//! The collector's modules depend on each other in one direction only (ADR 0016): this
//! reads every top-level module's `crate::NAME` paths (in `use` lines and in code,
//! comments and `#[cfg(test)]` modules left out; the reader is shared with the SDK's
//! layering test, `tests/shared/module_graph.rs`) and fails on a cycle, naming it.
//! The leaf modules (`labels`, `duration`, `error`, `protobuf`) must use no other module,
//! and the views (`views`) only leaf modules.

#[path = "../../../tests/shared/module_graph.rs"]
mod module_graph;

use std::path::Path;

use module_graph::{cycle, cycles, graph, graph_of};

#[test]
fn the_collector_s_modules_have_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    // The reader sees what the modules use (a reader that saw nothing would pass).
    assert!(graph["receivers"].contains("aggregate"), "{graph:#?}");
    assert!(graph["exporters"].contains("component"), "{graph:#?}");
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "import cycles between top-level modules: {cycles:?}\n{graph:#?}"
    );
    let leaves = ["labels", "duration", "error", "protobuf"];
    for leaf in leaves {
        assert!(graph[leaf].is_empty(), "{leaf} uses {:?}", graph[leaf]);
    }
    // The views read the store's read models only: no store, no aggregator, no exporter.
    assert!(
        graph["views"].iter().all(|m| leaves.contains(&m.as_str())),
        "views uses {:?}",
        graph["views"]
    );
    assert!(graph["aggregate"].contains("views"), "{graph:#?}");
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

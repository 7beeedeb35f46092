//! Which top-level modules of a crate's `src` use which, and the import cycles among
//! them: shared by the layering tests of the collector (`collector/tests/it/layering.rs`)
//! and the SDK (`sdk/higgsmeter/tests/it/layering.rs`), which include this file with
//! `#[path]`.
//!
//! It reads every top-level module's `crate::NAME` paths (in `use` lines and in code;
//! comments and `#[cfg(test)]` modules left out). A module is a file `src/NAME.rs`
//! and/or a folder `src/NAME/` (all of its files); `lib.rs` and `main.rs` are not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its test modules (`tests.rs`,
/// `*_tests.rs`, and from `#[cfg(test)]` before a `mod` to the end of the file, where
/// these crates keep them).
fn code(path: &Path) -> String {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).expect("read source");
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The top-level modules each top-level module of `src` uses.
pub(crate) fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("read src") {
        let path = entry.expect("entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_owned();
        if stem == "lib" || stem == "main" {
            continue;
        }
        let list = modules.entry(stem).or_default();
        if path.is_dir() {
            files(&path, list);
        } else {
            list.push(path);
        }
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, paths) in &modules {
        let mut uses = BTreeSet::new();
        for path in paths {
            let code = code(path);
            // `crate::a::b`, and `use crate::{a::x, b}`.
            let mut rest = code.as_str();
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let names_here: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find("};").unwrap_or(group.len());
                    group[..end]
                        .split([',', '\n', ' '])
                        .map(|p| p.split("::").next().unwrap_or("").trim())
                        .collect()
                } else {
                    vec![
                        rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or(""),
                    ]
                };
                for n in names_here {
                    if n != module && names.contains(n) {
                        uses.insert(n.to_owned());
                    }
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// A cycle through `from`, if there is one.
pub(crate) fn cycle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        target: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            path.push(next.clone());
            if next == target {
                return true;
            }
            if seen.insert(next.clone()) && walk(graph, next, target, path, seen) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = vec![from.to_owned()];
    walk(graph, from, from, &mut path, &mut BTreeSet::new()).then_some(path)
}

/// Every module's cycle, if it is on one.
pub(crate) fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    graph.keys().filter_map(|m| cycle(graph, m)).collect()
}

/// A graph from `(module, [modules it uses])` pairs, for tests of the cycle finder.
pub(crate) fn graph_of(edges: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    edges
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
        .collect()
}

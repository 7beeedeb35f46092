//! The repository explains itself, and only with what it holds:
//!
//! - every path `ARCHITECTURE.md` names in backticks exists (a moved or renamed file
//!   fails here until the map follows it);
//! - no file of the repository cites the design document the state contract came from,
//!   or a path into a `shared/` folder beside the checkout: the contract is
//!   `docs/state-contract.md`, the reasons are in `docs/adr/`.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::path::Path;
use std::process::Command;

/// Endings that make a backticked span a path even without a `/`.
const PATH_ENDINGS: [&str; 7] = [".rs", ".md", ".yaml", ".yml", ".toml", ".py", ".sh"];

/// Characters no repository path of ours has, but code, URLs, label sets, config keys
/// and PromQL do (`Aggregator::rows`, `type[/name]`, `{state="gpu"}`, `a=b`).
const NOT_IN_A_PATH: &[char] = &[
    ' ', '\t', ':', '*', '{', '}', '[', ']', '<', '>', '(', ')', '=', ',', ';', '"', '\'', '$',
    '|', '&', '?', '!', '#', '@',
];

/// The outside documents no file may cite, each spelled in two pieces so that this
/// file does not cite them itself.
const OUTSIDE: [&str; 2] = [concat!("DESIGN", ".md"), concat!("..", "/shared/")];

/// Whether a backticked span looks like a repository path: no character a path of
/// ours never has, not an endpoint (`/metrics`), and a `/` in it or a file ending.
fn looks_like_a_path(span: &str) -> bool {
    !span.is_empty()
        && !span.starts_with('/')
        && !span.contains(NOT_IN_A_PATH)
        && (span.contains('/') || PATH_ENDINGS.iter().any(|e| span.ends_with(e)))
}

/// The paths `markdown` names in backticks, with their line numbers; fenced code
/// blocks are skipped. A line with an odd number of backticks (a span wrapped over two
/// lines, which this reader would miss) is an error.
fn named_paths(markdown: &str) -> Result<Vec<(usize, &str)>, String> {
    let mut paths = Vec::new();
    let mut fenced = false;
    for (i, line) in markdown.lines().enumerate() {
        let n = i + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.matches('`').count() % 2 == 1 {
            return Err(format!(
                "line {n}: an odd number of backticks (keep each code span on one line): {line}"
            ));
        }
        paths.extend(
            line.split('`')
                .skip(1)
                .step_by(2)
                .filter(|span| looks_like_a_path(span))
                .map(|span| (n, span)),
        );
    }
    Ok(paths)
}

/// Every line of `text` that cites an outside document: (line number, line).
fn outside_citations(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| OUTSIDE.iter().any(|needle| line.contains(needle)))
        .map(|(i, line)| (i + 1, line))
        .collect()
}

#[test]
fn every_path_architecture_md_names_exists() {
    let root = higgsmeter_testkit::repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let paths = named_paths(&text).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    // The reader sees the map (a reader that saw nothing would pass).
    assert!(
        paths.len() >= 30,
        "ARCHITECTURE.md names only {} paths: {paths:?}",
        paths.len()
    );
    for must in ["collector/src/aggregate/mod.rs", "docs/state-contract.md"] {
        assert!(
            paths.iter().any(|(_, p)| *p == must),
            "ARCHITECTURE.md does not name {must}"
        );
    }
    let missing: Vec<String> = paths
        .iter()
        .filter(|(_, p)| !root.join(p).exists())
        .map(|(n, p)| format!("line {n}: {p}"))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_file_cites_a_document_outside_the_repository() {
    let root = higgsmeter_testkit::repo_root();
    // Tracked files, and new ones not yet committed (not those git ignores).
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("running git ls-files in {}: {e}", root.display()));
    assert!(
        out.status.success(),
        "git ls-files: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8(out.stdout).unwrap();
    let files: Vec<&str> = listed.split('\0').filter(|f| !f.is_empty()).collect();
    assert!(
        files.contains(&"ARCHITECTURE.md") && files.len() >= 100,
        "git ls-files listed {} files",
        files.len()
    );
    let mut citing = Vec::new();
    let mut read = 0;
    for file in files {
        if Path::new(file)
            .file_name()
            .is_some_and(|n| n == "Cargo.lock")
        {
            continue;
        }
        // Deleted in the working tree but still tracked: nothing to read.
        let Ok(bytes) = std::fs::read(root.join(file)) else {
            continue;
        };
        // Binary files (images, protobuf corpora) cite nothing.
        if bytes.contains(&0) {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        read += 1;
        for (n, line) in outside_citations(text) {
            citing.push(format!("{file}:{n}: {}", line.trim()));
        }
    }
    assert!(read >= 100, "only {read} text files read");
    assert!(
        citing.is_empty(),
        "files cite documents outside the repository (cite docs/state-contract.md or an \
         ADR instead):\n{}",
        citing.join("\n")
    );
}

#[test]
fn the_readers_find_what_they_look_for() {
    let md = "\
Intro `collector/src/lib.rs`, `Cargo.toml`, `README.md` and `sdk/nvml/`.
Not paths: `/metrics`, `Aggregator::rows`, `type[/name]`, `x{a=\"b/c\"}`, `sum_over`.
```text
`inside/a/fence.rs`
```
Last `.ci/setup`.
";
    let found: Vec<&str> = named_paths(md)
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        found,
        [
            "collector/src/lib.rs",
            "Cargo.toml",
            "README.md",
            "sdk/nvml/",
            ".ci/setup"
        ]
    );
    assert!(named_paths("a `wrapped\nspan` here").is_err());

    let cited = format!(
        "ok\nsee {} for why\nand {}seeds/x.txt\n",
        OUTSIDE[0], OUTSIDE[1]
    );
    let lines: Vec<usize> = outside_citations(&cited)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lines, [2, 3]);
    assert!(outside_citations("docs/state-contract.md and tests/shared/x.rs").is_empty());
}

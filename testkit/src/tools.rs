//! Programs the tests run that the workspace does not build: the test venv's Python and
//! `promtool` (`bash .ci/setup` installs both).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The Python interpreter of the test venv (the OpenTelemetry SDK, this repository's
/// package): `$HIGGSMETER_PYTHON`, else the repository's `.venv/bin/python`. Panics
/// when it is missing.
pub fn python() -> PathBuf {
    let path = std::env::var_os("HIGGSMETER_PYTHON").map_or_else(
        || crate::repo_root().join(".venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "no Python at {}: run `bash .ci/setup` (or set HIGGSMETER_PYTHON) to create the venv with the OpenTelemetry SDK",
        path.display()
    );
    path
}

/// The test venv that [`python`] belongs to (`.venv`, or the venv of
/// `$HIGGSMETER_PYTHON`: its `bin/`'s parent), where `.ci/setup` also puts the seed's
/// Python higgsmeter (`seed/`).
pub fn venv() -> PathBuf {
    let python = python();
    python
        .parent()
        .and_then(|bin| bin.parent())
        .unwrap_or_else(|| panic!("{} is not in a venv's bin/", python.display()))
        .to_path_buf()
}

/// `promtool` (Debian's `prometheus` package): `$PROMTOOL`, else the first on `PATH`,
/// else `/usr/bin/promtool`.
pub fn promtool() -> PathBuf {
    if let Some(path) = std::env::var_os("PROMTOOL") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("promtool"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/bin/promtool")])
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "promtool not found: run `bash .ci/setup` (installs Debian's prometheus package)"
            )
        })
}

/// promtool lint findings that come from the catalog's names, which the collector and
/// the SDK export exactly (ADR 2: catalog counters without `_total`, the seed's gauge
/// `mstar_kv_pages_total` with it).
pub fn catalog_lints() -> Vec<String> {
    let mut out = Vec::new();
    for family in higgsmeter_catalog::ALL_FAMILY_GROUPS
        .iter()
        .flat_map(|g| g.iter())
    {
        let counter = family.kind == higgsmeter_catalog::Kind::Counter;
        if counter && !family.name.ends_with("_total") {
            out.push(format!(
                r#"{} counter metrics should have "_total" suffix"#,
                family.name
            ));
        }
        if !counter && family.name.ends_with("_total") {
            out.push(format!(
                r#"{} non-counter metrics should not have "_total" suffix"#,
                family.name
            ));
        }
    }
    out
}

/// Runs `promtool check metrics` on `text`; panics with its output on a parse error or
/// on any lint finding other than [`catalog_lints`].
pub fn promtool_check(text: &str) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool's output");
    let findings: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let allowed = catalog_lints();
    let unexpected: Vec<&String> = findings.iter().filter(|f| !allowed.contains(f)).collect();
    // Exit 0: clean; 3: lint findings only (all allowed, checked above); 1: invalid.
    let ok_status = out.status.success() || (out.status.code() == Some(3) && !findings.is_empty());
    assert!(
        ok_status && unexpected.is_empty(),
        "promtool check metrics failed ({:?}): {unexpected:?}\n--- text ---\n{text}",
        out.status
    );
}

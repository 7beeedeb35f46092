//! `promtool check config`, `promtool check rules` and `promtool test rules` on the
//! shipped otel-config/: every recording and alert rule has a unit test, and the unit
//! tests pass against the real promtool.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn config_dir() -> PathBuf {
    higgsmeter_e2e::repo_root().join("otel-config")
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let bin = std::env::var("PROMTOOL").unwrap_or_else(|_| "/usr/bin/promtool".into());
    let out = Command::new(&bin)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {bin} (install with `bash .ci/setup`): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

const RULE_FILES: [&str; 2] = ["higgsmeter.rules.yml", "higgsmeter.alerts.yml"];
const TEST_FILES: [&str; 2] = ["higgsmeter.rules.test.yml", "higgsmeter.alerts.test.yml"];

#[test]
fn prometheus_config_is_valid() {
    let text = promtool(&["check", "config", "prometheus.yml"], &config_dir());
    assert!(text.contains("SUCCESS: 2 rule files found"), "{text}");
}

#[test]
fn rules_are_valid() {
    let text = promtool(
        &["check", "rules", RULE_FILES[0], RULE_FILES[1]],
        &config_dir().join("rules"),
    );
    assert_eq!(text.matches("SUCCESS").count(), 2, "{text}");
}

#[test]
fn rule_unit_tests_pass() {
    let text = promtool(
        &["test", "rules", TEST_FILES[0], TEST_FILES[1]],
        &config_dir().join("rules"),
    );
    assert_eq!(text.matches("SUCCESS").count(), 2, "{text}");
}

/// Every `record:` and `alert:` of the rule files is named in a unit test.
#[test]
fn every_rule_has_a_unit_test() {
    let dir = config_dir().join("rules");
    let mut names = BTreeSet::new();
    for file in RULE_FILES {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for line in text.lines() {
            let line = line.trim_start().trim_start_matches("- ");
            for key in ["record:", "alert:"] {
                if let Some(name) = line.strip_prefix(key) {
                    names.insert(name.trim().to_owned());
                }
            }
        }
    }
    assert!(names.len() >= 17, "found only {names:?}");
    let tests: String = TEST_FILES
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
        .collect();
    let untested: Vec<_> = names
        .iter()
        .filter(|name| {
            !tests.contains(&format!("expr: {name}"))
                && !tests.contains(&format!("alertname: {name}\n"))
        })
        .collect();
    assert!(
        untested.is_empty(),
        "rules without a unit test: {untested:?}"
    );
}

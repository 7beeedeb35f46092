//! The shipped rules in both flavours (`otel-config/rules/`: scrape,
//! `otel-config/rules/remote-write/`: remote write), rendered from one source
//! (`otel-config/rules/source/`, see `higgsmeter_e2e::rules`): the committed files are
//! what the source renders to; `promtool check config`, `promtool check rules` and
//! `promtool test rules` pass on each flavour, whose unit tests feed series shaped the
//! way that flavour's data lands (scraped: `job` is the view, `exported_job` the
//! service; remote-written: `job` is the service, `higgsmeter_view` the view, no `up`,
//! no staleness markers); every recording and alert rule has a unit test in each; and a
//! second rule engine, vmalert (Debian's `victoria-metrics`), loads both.
//!
//! `HIGGSMETER_WRITE_RULES=1 cargo test -p higgsmeter-e2e --test it rules::` rewrites the
//! generated files from the source.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use higgsmeter_e2e::rules::{Flavour, rendered, rule_files};

fn config_dir() -> PathBuf {
    higgsmeter_testkit::repo_root().join("otel-config")
}

fn run(bin: &Path, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running {} (install with `bash .ci/setup`): {e}",
                bin.display()
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let (ok, text) = run(&higgsmeter_testkit::tools::promtool(), args, dir);
    assert!(ok, "promtool {args:?} in {} failed:\n{text}", dir.display());
    text
}

const RULE_FILES: [&str; 2] = ["higgsmeter.rules.yml", "higgsmeter.alerts.yml"];
const TEST_FILES: [&str; 2] = ["higgsmeter.rules.test.yml", "higgsmeter.alerts.test.yml"];

#[test]
fn both_flavours_are_rendered_from_one_source() {
    let write = std::env::var_os("HIGGSMETER_WRITE_RULES").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (path, want) in rendered().unwrap() {
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have == want {
            continue;
        }
        if write {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
        } else {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "not what otel-config/rules/source/ renders to (edit the source, then run \
         `HIGGSMETER_WRITE_RULES=1 cargo test -p higgsmeter-e2e --test it rules::`): {stale:#?}"
    );
}

/// The two flavours differ where the data's shape differs, and only there: the same
/// groups, the same recorded series and alerts, in the same order.
#[test]
fn both_flavours_have_the_same_rules() {
    let names = |flavour: Flavour| -> Vec<String> {
        let mut out = Vec::new();
        for file in RULE_FILES {
            let text = std::fs::read_to_string(flavour.dir().join(file)).unwrap();
            for line in text.lines() {
                let line = line.trim_start().trim_start_matches("- ");
                for key in ["name:", "record:", "alert:"] {
                    if let Some(name) = line.strip_prefix(key) {
                        out.push(format!("{key} {}", name.trim()));
                    }
                }
            }
        }
        out
    };
    let scrape = names(Flavour::Scrape);
    assert!(scrape.len() >= 20, "{scrape:?}");
    assert_eq!(scrape, names(Flavour::RemoteWrite));
    // What only exists when Prometheus scrapes the collector is not in the
    // remote-write flavour.
    for file in RULE_FILES {
        let text = std::fs::read_to_string(Flavour::RemoteWrite.dir().join(file)).unwrap();
        let rules = text.split_once("groups:").unwrap().1;
        for scraped_only in [
            "exported_job",
            "exported_instance",
            "higgsmeter_sources",
            "job=\"higgsmeter\"",
            "up{",
        ] {
            assert!(
                !rules.contains(scraped_only),
                "remote-write/{file} selects on {scraped_only}"
            );
        }
    }
}

#[test]
fn prometheus_config_is_valid() {
    let text = promtool(&["check", "config", "prometheus.yml"], &config_dir());
    assert!(text.contains("SUCCESS: 2 rule files found"), "{text}");
}

#[test]
fn rules_are_valid() {
    for flavour in Flavour::ALL {
        let text = promtool(
            &["check", "rules", RULE_FILES[0], RULE_FILES[1]],
            &flavour.dir(),
        );
        assert_eq!(text.matches("SUCCESS").count(), 2, "{flavour:?}: {text}");
    }
}

#[test]
fn rule_unit_tests_pass() {
    for flavour in Flavour::ALL {
        let text = promtool(
            &["test", "rules", TEST_FILES[0], TEST_FILES[1]],
            &flavour.dir(),
        );
        assert_eq!(text.matches("SUCCESS").count(), 2, "{flavour:?}: {text}");
    }
}

/// Every `record:` and `alert:` of the rule files is named in a unit test of the same
/// flavour.
#[test]
fn every_rule_has_a_unit_test() {
    for flavour in Flavour::ALL {
        let dir = flavour.dir();
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
        assert!(names.len() >= 17, "{flavour:?}: found only {names:?}");
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
            "{flavour:?}: rules without a unit test: {untested:?}"
        );
    }
}

/// A second rule engine: vmalert (`/usr/bin/vmalert` from Debian's `victoria-metrics`,
/// or `$VMALERT`) parses every expression (MetricsQL) and template of both flavours.
/// `tests/tests/it/rules_remote_write.rs` runs them on remote-written data.
#[test]
fn vmalert_loads_both_flavours() {
    let bin = higgsmeter_testkit::victoria::vmalert_binary();
    for flavour in Flavour::ALL {
        let files = rule_files(&flavour.dir());
        let mut args = vec!["-dryRun".to_owned(), "-loggerLevel=INFO".to_owned()];
        args.extend(files.iter().map(|f| format!("-rule={}", f.display())));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, text) = run(&bin, &args, &flavour.dir());
        assert!(
            ok,
            "vmalert {args:?} refused the {flavour:?} rules:\n{text}"
        );
        assert!(!text.contains("\terror\t"), "{flavour:?}: {text}");
    }
    // ... and it does check: a broken expression is refused.
    let dir = higgsmeter_testkit::TempDir::new("vmalert-bad");
    let bad = dir.join("vmalert-bad.yml");
    std::fs::write(
        &bad,
        "groups:\n  - name: bad\n    rules:\n      - record: a:b\n        expr: sum(rate(x{[5m]))\n",
    )
    .unwrap();
    let (ok, text) = run(
        &bin,
        &["-dryRun", &format!("-rule={}", bad.display())],
        dir.path(),
    );
    assert!(!ok, "vmalert accepted a broken expression:\n{text}");
}

//! Static checks of otel-config/ that need no server: the Grafana dashboard's shape, and
//! that every selector over a family the collector serves names its view with a `job`
//! matcher (both views carry the same names; a selector without one counts twice).
#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeSet;

use higgsmeter::catalog::ALL_FAMILY_GROUPS;

fn read(path: &str) -> String {
    std::fs::read_to_string(higgsmeter_testkit::repo_root().join(path)).unwrap()
}

/// Every `name{...}` selector (also `name_bucket{`, `_count{`, `_sum{`) of a catalog
/// family in `text`: (family, matchers).
fn selectors(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for family in ALL_FAMILY_GROUPS.iter().flat_map(|g| g.iter()) {
        for suffix in ["", "_bucket", "_count", "_sum"] {
            let needle = format!("{}{suffix}{{", family.name);
            for (at, _) in text.match_indices(&needle) {
                // A longer name that merely ends with this one is not this family.
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let rest = &text[at + needle.len()..];
                let end = rest.find('}').unwrap();
                out.push((format!("{}{suffix}", family.name), rest[..end].to_owned()));
            }
        }
    }
    out
}

fn assert_views_named(path: &str) {
    assert_views_named_by(path, "job=");
}

/// Every selector of a catalog family in `path` has a matcher on `label` (`job=` for
/// scraped data, where the scrape job is the view; `higgsmeter_view=` for
/// remote-written data).
fn assert_views_named_by(path: &str, label: &str) {
    let text = read(path);
    let found = selectors(&text);
    assert!(found.len() >= 5, "{path}: only {found:?}");
    let bare: Vec<_> = found
        .iter()
        .filter(|(_, matchers)| !matchers.contains(label))
        .collect();
    assert!(
        bare.is_empty(),
        "{path}: selectors without a {label} matcher: {bare:?}"
    );
}

#[test]
fn rules_name_the_view_in_every_selector() {
    assert_views_named("otel-config/rules/higgsmeter.rules.yml");
    assert_views_named("otel-config/rules/higgsmeter.alerts.yml");
    assert_views_named_by(
        "otel-config/rules/remote-write/higgsmeter.rules.yml",
        "higgsmeter_view=",
    );
    assert_views_named_by(
        "otel-config/rules/remote-write/higgsmeter.alerts.yml",
        "higgsmeter_view=",
    );
}

#[test]
fn dashboard_names_the_view_in_every_selector() {
    assert_views_named("otel-config/grafana/higgsmeter.json");
}

#[test]
fn dashboard_is_well_formed() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("otel-config/grafana/higgsmeter.json")).unwrap();
    assert_eq!(dashboard["uid"], "higgsmeter-fleet");
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "duplicate id: {panel}"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24 && grid["h"].as_u64().unwrap() > 0, "{panel}");
        let title = panel["title"].as_str().unwrap().to_owned();
        if panel["type"] == "row" {
            continue;
        }
        assert!(titles.insert(title.clone()), "duplicate title {title}");
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        let refs: BTreeSet<_> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len(), "{title}: duplicate refId");
        for t in targets {
            assert!(!t["expr"].as_str().unwrap().is_empty(), "{title}");
        }
    }
    // What issue 5 asks the dashboard to show.
    for want in [
        "Fleet time share by state",
        "State per rank",
        "GPU utilisation (NVML)",
        "Engine step latency quantiles",
        "Points received and refused",
    ] {
        assert!(titles.contains(want), "no panel {want:?} in {titles:?}");
    }
    let vars: Vec<_> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "service", "rank"]);
}

//! The rule files of `otel-config/rules/` in two flavours generated from one source.
//!
//! `otel-config/rules/source/*.yml.tmpl` is the only place a rule is written. Each
//! [`Flavour`] renders it for one way the data lands: [`Flavour::Scrape`] for a
//! Prometheus that scrapes the collector's two views (`otel-config/rules/*.yml`, what
//! `otel-config/prometheus.yml` loads) and [`Flavour::RemoteWrite`] for a TSDB that
//! receives the collector's remote write (`otel-config/rules/remote-write/*.yml`).
//!
//! The template language is two things, nothing more:
//! - `${NAME}`: replaced by the flavour's value of `NAME` (see [`Flavour::var`]); an
//!   unknown name is an error.
//! - whole lines `#if scrape` / `#if remote_write`, `#else`, `#end` (indentation
//!   ignored, nesting allowed): the lines between are kept only in that flavour; the
//!   marker lines themselves are dropped.
//!
//! `tests/tests/it/rules.rs` checks that the committed files are what this renders, and
//! rewrites them with `HIGGSMETER_WRITE_RULES=1`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// Where the data lands, and so which labels the rules select on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// Prometheus scrapes `/metrics` as job `higgsmeter` and `/metrics/sources` as job
    /// `higgsmeter_sources` (`honor_labels: false`): the service is `exported_job`, the
    /// source's instance id `exported_instance`, and `up` exists.
    Scrape,
    /// The collector remote-writes: the service is `job`, the source's instance id
    /// `instance`, the per-source view is marked `higgsmeter_view="sources"`, and
    /// there is no scrape (no `up`).
    RemoteWrite,
}

/// The template files, under `otel-config/rules/source/`, and the name each renders
/// to.
pub const TEMPLATES: [(&str, &str); 2] = [
    ("higgsmeter.rules.yml.tmpl", "higgsmeter.rules.yml"),
    ("higgsmeter.alerts.yml.tmpl", "higgsmeter.alerts.yml"),
];

impl Flavour {
    /// Both flavours.
    pub const ALL: [Flavour; 2] = [Flavour::Scrape, Flavour::RemoteWrite];

    /// The flavour's name in `#if` lines.
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Scrape => "scrape",
            Flavour::RemoteWrite => "remote_write",
        }
    }

    /// The directory its rule files (and their unit tests) live in.
    pub fn dir(self) -> PathBuf {
        let rules = higgsmeter_testkit::repo_root().join("otel-config/rules");
        match self {
            Flavour::Scrape => rules,
            Flavour::RemoteWrite => rules.join("remote-write"),
        }
    }

    /// The value of a template variable.
    pub fn var(self, name: &str) -> Option<&'static str> {
        let scrape = self == Flavour::Scrape;
        Some(match name {
            // The fleet view (`/metrics`): sums over sources, per-source gauges such
            // as worker_current_state, the collector's own families.
            "FLEET" if scrape => r#"job="higgsmeter""#,
            "FLEET" => r#"higgsmeter_view="""#,
            // The per-source view (`/metrics/sources`; remote write: include_sources).
            "SOURCES" if scrape => r#"job="higgsmeter_sources""#,
            "SOURCES" => r#"higgsmeter_view="sources""#,
            // Where the rules read worker_current_state, one series per source. Both
            // views carry it; remote write reads the fleet view's, which is sent
            // without include_sources.
            "STATES" if scrape => r#"job="higgsmeter_sources""#,
            "STATES" => r#"higgsmeter_view="""#,
            // The workers' service.name.
            "SERVICE" if scrape => "exported_job",
            "SERVICE" => "job",
            // A source's service.instance.id.
            "SOURCE" if scrape => "exported_instance",
            "SOURCE" => "instance",
            _ => return None,
        })
    }

    /// `template` (the text of `source/<file>`) rendered for this flavour, with a
    /// header that says where it came from.
    pub fn render(self, file: &str, template: &str) -> anyhow::Result<String> {
        let mut out = format!(
            "# GENERATED from otel-config/rules/source/{file} ({} flavour): edit that\n\
             # file, then run `HIGGSMETER_WRITE_RULES=1 cargo test -p higgsmeter-e2e --test it rules::`.\n",
            self.name()
        );
        // One entry per open `#if`: whether its current branch is kept.
        let mut open: Vec<bool> = Vec::new();
        for (n, line) in template.lines().enumerate() {
            let at = || format!("{file}:{}", n + 1);
            let marker = line.trim();
            if let Some(which) = marker.strip_prefix("#if ") {
                let which = which.trim();
                if !Flavour::ALL.iter().any(|f| f.name() == which) {
                    bail!("{}: unknown flavour {which:?}", at());
                }
                open.push(which == self.name());
                continue;
            }
            if marker == "#else" {
                let top = open
                    .last_mut()
                    .with_context(|| format!("{}: #else without #if", at()))?;
                *top = !*top;
                continue;
            }
            if marker == "#end" {
                open.pop()
                    .with_context(|| format!("{}: #end without #if", at()))?;
                continue;
            }
            if open.iter().all(|keep| *keep) {
                out.push_str(&self.substitute(line).with_context(at)?);
                out.push('\n');
            }
        }
        if !open.is_empty() {
            bail!("{file}: {} #if without #end", open.len());
        }
        Ok(out)
    }

    fn substitute(self, line: &str) -> anyhow::Result<String> {
        let mut out = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').context("`${` without `}`")?;
            let name = &after[..end];
            let value = self
                .var(name)
                .with_context(|| format!("unknown variable ${{{name}}}"))?;
            out.push_str(value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Every rule file of every flavour: (its path, what the templates render to).
pub fn rendered() -> anyhow::Result<Vec<(PathBuf, String)>> {
    let source = higgsmeter_testkit::repo_root().join("otel-config/rules/source");
    let mut out = Vec::new();
    for (template, name) in TEMPLATES {
        let path = source.join(template);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for flavour in Flavour::ALL {
            out.push((flavour.dir().join(name), flavour.render(template, &text)?));
        }
    }
    Ok(out)
}

/// The rule files' names in `dir`, as a `promtool`/`vmalert` argument list would
/// give them.
pub fn rule_files(dir: &Path) -> Vec<PathBuf> {
    TEMPLATES.iter().map(|(_, name)| dir.join(name)).collect()
}

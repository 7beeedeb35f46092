//! Configs as users write them: every YAML snippet of `README.md` and
//! `otel-config/README.md`, and every collector config in `otel-config/*.yaml`, passes
//! the collector binary's `--check-config` (their certificate, key and token paths
//! pointed at files made here); the README's TLS example starts; a `service.extensions`
//! list without `file_storage` keeps the default storage and the log says where it is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use higgsmeter_testkit::pki::Pki;

/// Files of another program's config, not the collector's: what each is for.
const NOT_OURS: &[(&str, &str)] = &[
    (
        "otelcol-contrib.yaml",
        "the upstream OpenTelemetry Collector's equivalent config",
    ),
    ("prometheus.yml", "Prometheus' scrape config"),
];

/// A CA, a certificate for localhost signed by it with its key (the kit's PKI), and a
/// token file.
struct Files {
    pki: Pki,
}

impl Files {
    fn new() -> Files {
        let pki = Pki::new("snippet CA");
        std::fs::write(pki.dir().join("token"), "snippet-token\n").expect("write");
        Files { pki }
    }

    /// The file standing in for `key`'s value.
    fn for_key(&self, key: &str) -> PathBuf {
        self.pki.dir().join(match key {
            "cert_file" => "server.pem",
            "key_file" => "server.key",
            "ca_file" | "client_ca_file" => "ca.pem",
            _ => "token",
        })
    }

    /// `yaml` with every file path (`cert_file`, `key_file`, `ca_file`,
    /// `client_ca_file`, `filename`) pointed at these files, block or flow style, and
    /// `directory` at a fresh temporary directory.
    fn substitute(&self, yaml: &str) -> String {
        let mut out = yaml.to_owned();
        for key in [
            "client_ca_file",
            "ca_file",
            "cert_file",
            "key_file",
            "filename",
            "directory",
        ] {
            let value = if key == "directory" {
                temp_dir("snippet-state")
            } else {
                self.for_key(key)
            };
            out = replace_values(&out, key, &value.display().to_string());
        }
        out
    }
}

/// Replaces the value of every `key:` (not a longer key ending in it) up to the next
/// space, `,`, `}` or line end.
fn replace_values(text: &str, key: &str, value: &str) -> String {
    let pattern = format!("{key}:");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&pattern) {
        let before = rest[..at].chars().next_back();
        let (head, tail) = rest.split_at(at + pattern.len());
        out.push_str(head);
        rest = tail;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let spaces = rest.len() - rest.trim_start_matches(' ').len();
        let old_len = rest[spaces..]
            .find(|c: char| c.is_whitespace() || c == ',' || c == '}')
            .unwrap_or(rest.len() - spaces);
        if old_len == 0 {
            continue; // a mapping follows on the next lines
        }
        out.push(' ');
        out.push_str(value);
        rest = &rest[spaces + old_len..];
    }
    out.push_str(rest);
    out
}

/// The ```yaml blocks of a Markdown file, with their first line numbers.
fn yaml_blocks(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).expect("read the Markdown file");
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start().starts_with("```yaml") => {
                current = Some((n + 2, String::new()))
            }
            Some(_) if line.trim_start().starts_with("```") => blocks.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// Every snippet to check: (where it is, its text).
fn snippets() -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    for md in ["README.md", "otel-config/README.md"] {
        for (line, body) in yaml_blocks(&root.join(md)) {
            out.push((format!("{md}:{line}"), body));
        }
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("otel-config"))
        .expect("read otel-config")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    for path in files {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if NOT_OURS.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read the config");
        out.push((format!("otel-config/{name}"), text));
    }
    out
}

/// Runs `--check-config` on `yaml`: whether it passed, and what it printed.
fn check(yaml: &str) -> (bool, String) {
    let path = temp_dir("snippet").join("config.yaml");
    std::fs::write(&path, yaml).expect("write");
    let out = Command::new(bins::collector())
        .arg("--config")
        .arg(&path)
        .arg("--check-config")
        .output()
        .expect("run --check-config");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn every_documented_yaml_snippet_passes_check_config() {
    let files = Files::new();
    let snippets = snippets();
    // README: remote write; otel-config/README.md: remote write, traces, TLS; the
    // shipped collector.yaml and tls.yaml.
    assert!(
        snippets.len() >= 6,
        "found only {} snippets",
        snippets.len()
    );
    let mut failures = Vec::new();
    for (place, yaml) in &snippets {
        let (ok, text) = check(&files.substitute(yaml));
        if !ok {
            failures.push(format!("{place}:\n{yaml}\n→ {text}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} snippets fail --check-config:\n\n{}",
        failures.len(),
        snippets.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_readme_tls_example_starts_with_file_storage_listed_without_a_section() {
    let files = Files::new();
    let (place, yaml) = snippets()
        .into_iter()
        .find(|(place, yaml)| {
            place.starts_with("otel-config/README.md")
                && yaml.contains("extensions: [file_storage, bearertokenauth]")
        })
        .expect("the TLS example in otel-config/README.md");
    assert!(
        !yaml.contains("file_storage:"),
        "{place} now has a file_storage section: this test is about the one without"
    );
    let yaml = files.substitute(&yaml);
    let state = temp_dir("tls-example-state");
    let collector = CollectorProcess::start(Some(&yaml), &["--storage", &state.to_string_lossy()]);
    assert!(collector.terminate().success());
    assert!(state.join(higgsmeter_collector::STATE_FILE).exists());
}

#[test]
fn extensions_without_file_storage_keep_the_default_storage_and_the_log_says_where() {
    let yaml = "extensions:\n  bearertokenauth:\n    token: t0k3n\nreceivers:\n  otlp:\n    protocols:\n      http:\n        auth: {authenticator: bearertokenauth}\nservice:\n  extensions: [bearertokenauth]\n";
    let (ok, text) = check(yaml);
    assert!(ok, "{text}");
    assert!(
        text.contains("aggregation state: /")
            && text.contains("higgsmeter-data/higgsmeter-collector.state"),
        "{text}"
    );
    // Started in a scratch working directory: the default storage is created there,
    // and the start log names it.
    let cwd = temp_dir("default-storage");
    let mut collector = CollectorProcess::builder()
        .current_dir(&cwd)
        .config(yaml)
        .env("RUST_LOG", "info")
        .capture_stderr(None)
        .start();
    // SIGTERM: a clean stop writes the final checkpoint.
    collector.sigterm();
    let status = collector.wait_exit(Duration::from_secs(30));
    let log = collector.log_to_end(Duration::from_secs(10));
    assert!(status.success(), "{status:?}\n{log}");
    let state = cwd
        .join("higgsmeter-data")
        .join(higgsmeter_collector::STATE_FILE);
    assert!(state.exists(), "no state at {}:\n{log}", state.display());
    assert!(
        log.contains(&format!("aggregation state: {}", state.display())),
        "the log does not say where the state lives:\n{log}"
    );
}

#[test]
fn replace_values_handles_block_and_flow_style() {
    let yaml = "tls: {cert_file: /a.pem, key_file: /a.key}\n  client_ca_file: /c.pem\n  ca_file: /d.pem  # note\n  tls:\n";
    let out = replace_values(&replace_values(yaml, "ca_file", "X"), "cert_file", "Y");
    assert_eq!(
        out,
        "tls: {cert_file: Y, key_file: /a.key}\n  client_ca_file: /c.pem\n  ca_file: X  # note\n  tls:\n"
    );
}

//! Shared helpers for the SDK's integration tests.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "test code: each module uses a part; a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use higgsmeter::{ActivityLayer, AppState, ManualClock, Snapshot, Tracker};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

/// A tracker on a manual clock and a dispatcher that accounts its spans.
pub fn manual() -> (Tracker, ManualClock, Dispatch) {
    let clock = ManualClock::new();
    let tracker = Tracker::with_clock(clock.clone());
    let dispatch =
        Dispatch::new(tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone())));
    (tracker, clock, dispatch)
}

/// Asserts the invariant: the (state, operation) times sum to the elapsed time, exactly.
pub fn assert_exact(snap: &Snapshot) {
    assert_eq!(
        snap.sum(),
        snap.elapsed(),
        "activity must sum to wall time: {snap:#?}"
    );
}

/// Milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Time in (state, op), zero if never visited.
pub fn at(snap: &Snapshot, state: AppState, op: &str) -> Duration {
    snap.get(state, op).unwrap_or_default()
}

/// A layer counting WARN events of target `higgsmeter` (to check warn-once behaviour).
#[derive(Clone, Default)]
pub struct WarnCounter(pub Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarnCounter {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() == tracing::Level::WARN
            && event.metadata().target() == "higgsmeter"
        {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// `GET path` from a server on `addr`, HTTP/1.1 with `Connection: close`: (status, body).
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers end");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (size, after) = rest.split_once("\r\n").expect("chunk size");
            let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
            if size == 0 {
                break;
            }
            out.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        out
    } else {
        body.to_owned()
    };
    (status, body)
}

/// One family of a Prometheus text exposition.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ExpoFamily {
    /// `# TYPE` word.
    pub kind: String,
    /// `# HELP` text.
    pub help: String,
    /// (sample name, sorted labels) → value.
    pub samples: std::collections::BTreeMap<(String, Vec<(String, String)>), f64>,
}

/// Parses Prometheus text exposition (0.0.4) into families keyed by their TYPE name,
/// panicking on a duplicated series.
pub fn parse_exposition(text: &str) -> std::collections::BTreeMap<String, ExpoFamily> {
    let mut families: std::collections::BTreeMap<String, ExpoFamily> = Default::default();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(name.to_owned()).or_default().help = help.to_owned();
            current = name.to_owned();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            families.entry(name.to_owned()).or_default().kind = kind.to_owned();
            current = name.to_owned();
        } else if line.starts_with('#') {
            continue;
        } else {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut pairs: Vec<(String, String)> = Vec::new();
            let mut rest = labels;
            while let Some((k, after)) = rest.split_once("=\"") {
                let mut end = 0;
                let bytes = after.as_bytes();
                while bytes[end] != b'"' || (end > 0 && bytes[end - 1] == b'\\') {
                    end += 1;
                }
                pairs.push((
                    k.trim_start_matches(',').to_owned(),
                    after[..end].to_owned(),
                ));
                rest = &after[end + 1..];
            }
            pairs.sort();
            let value: f64 = value.parse().expect("sample value");
            let family = families.entry(current.clone()).or_default();
            let key = (name.to_owned(), pairs);
            assert!(
                family.samples.insert(key.clone(), value).is_none(),
                "duplicated series {key:?}"
            );
        }
    }
    families
}

/// The repository's root.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The Python of the test venv (`bash .ci/setup` makes it).
pub fn python() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("HIGGSMETER_PYTHON") {
        return p.into();
    }
    let p = repo_root().join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `bash .ci/setup` to create the test venv",
        p.display()
    );
    p
}

/// Lint findings of `promtool check metrics` that come from the seed catalog's own,
/// fixed names (see docs/adr/0002-seed-names-over-promtool-lint.md): the serving
/// engine's gauge `mstar_kv_pages_total` ends in `_total`.
pub const SEED_LINTS: &[&str] =
    &[r#"mstar_kv_pages_total non-counter metrics should not have "_total" suffix"#];

/// Runs `promtool check metrics` on an exposition; panics with its output on any
/// finding other than [`SEED_LINTS`].
pub fn promtool_check_metrics(exposition: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package `prometheus`; run `bash .ci/setup`)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let findings: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let unexpected: Vec<&String> = findings
        .iter()
        .filter(|f| !SEED_LINTS.contains(&f.as_str()))
        .collect();
    assert!(
        unexpected.is_empty() && (out.status.success() || !findings.is_empty()),
        "promtool check metrics failed ({}): {unexpected:?}\n--- exposition ---\n{exposition}",
        out.status
    );
}

/// A builder for tests: no environment, no global subscriber or meter provider,
/// accounting `tracker`.
pub fn isolated(tracker: &Tracker) -> higgsmeter::TelemetryBuilder {
    higgsmeter::Telemetry::builder()
        .with_env(false)
        .with_subscriber(false)
        .with_global_meter_provider(false)
        .with_tracker(tracker.clone())
}

/// [`isolated`] with an in-memory exporter that exports only when flushed.
pub fn with_memory_exporter<E: opentelemetry_sdk::metrics::exporter::PushMetricExporter>(
    tracker: &Tracker,
    exporter: E,
) -> higgsmeter::TelemetryBuilder {
    isolated(tracker).with_periodic_exporter(exporter, Duration::from_secs(3600))
}

//! The live terminal view: each rank's current state and share of time, read from the
//! collector's `GET /api/cluster` (the document the cluster page reads).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use higgsmeter_catalog::{STATE_CPU, STATE_GPU, STATE_IDLE, STATE_IO};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// One source of `/api/cluster`, as the view shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Source {
    /// The `rank` resource attribute.
    pub(crate) rank: Option<String>,
    /// The current state's name (`worker_current_state`), if reported and known.
    pub(crate) state: Option<String>,
    /// Seconds per state since the source started.
    pub(crate) seconds_by_state: Vec<(String, f64)>,
    /// Whether the source pushed recently.
    pub(crate) live: bool,
}

/// The sources of an `/api/cluster` document, live ones first, then by rank.
pub(crate) fn sources(doc: &serde_json::Value) -> Vec<Source> {
    let mut out: Vec<Source> = doc["sources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| Source {
            rank: s["rank"].as_str().map(str::to_owned),
            state: s["state"].as_str().map(str::to_owned),
            seconds_by_state: s["seconds_by_state"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(0.0)))
                        .collect()
                })
                .unwrap_or_default(),
            live: s["live"].as_bool().unwrap_or(false),
        })
        .collect();
    let rank = |s: &Source| s.rank.as_deref().and_then(|r| r.parse::<i64>().ok());
    out.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| rank(a).cmp(&rank(b))));
    out
}

/// `GET http://{addr}{path}` (HTTP/1.0, one connection), parsed as JSON.
pub(crate) async fn get_json(addr: SocketAddr, path: &str) -> anyhow::Result<serde_json::Value> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(2), fetch)
        .await
        .with_context(|| format!("GET {path}: no answer within 2 s"))?
        .with_context(|| format!("GET {path}"))?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: not an HTTP response"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path}: {status}");
    }
    serde_json::from_str(body).with_context(|| format!("GET {path}: not JSON"))
}

/// The states with a column of their own, with their bar character.
const SHOWN: [(&str, char); 4] = [
    (STATE_GPU.name, '#'),
    (STATE_IO.name, '='),
    (STATE_CPU.name, '+'),
    (STATE_IDLE.name, '.'),
];

/// One screen of the live view.
pub(crate) fn render(sources: &[Source], prometheus: &str, elapsed: Duration) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "higgsmeter demo — {} rank(s), {:.0}s  |  Prometheus: {prometheus}  (ctrl-c to stop)\n\n",
        sources.iter().filter(|s| s.live).count(),
        elapsed.as_secs_f64()
    ));
    out.push_str("rank  now       gpu     io      cpu     idle    other   share of time\n");
    for s in sources {
        let total: f64 = s.seconds_by_state.iter().map(|(_, v)| v).sum();
        let share = |name: &str| {
            let v: f64 = s
                .seconds_by_state
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v)
                .sum();
            if total > 0.0 {
                (v / total).max(0.0)
            } else {
                0.0
            }
        };
        let other = 1.0 - SHOWN.iter().map(|(n, _)| share(n)).sum::<f64>();
        let now = match &s.state {
            _ if !s.live => "gone",
            Some(state) => state.as_str(),
            None => "?",
        };
        let mut bar = String::new();
        for (name, ch) in SHOWN {
            bar.extend(std::iter::repeat_n(
                ch,
                (share(name) * 30.0).round() as usize,
            ));
        }
        out.push_str(&format!(
            "{:<5} {:<9} {:>5.1}%  {:>5.1}%  {:>5.1}%  {:>5.1}%  {:>5.1}%  {bar}\n",
            s.rank.as_deref().unwrap_or("-"),
            now,
            share(STATE_GPU.name) * 100.0,
            share(STATE_IO.name) * 100.0,
            share(STATE_CPU.name) * 100.0,
            share(STATE_IDLE.name) * 100.0,
            other.max(0.0) * 100.0,
        ));
    }
    out.push_str("\nshare of time since each rank started: # gpu, = io, + cpu, . idle (other: warm-up, start-up, shut-down)\n");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[test]
    fn sources_are_read_from_the_cluster_document_and_rendered() {
        let doc = serde_json::json!({ "sources": [
            { "rank": "1", "state": null, "seconds_by_state": { "gpu": 1.0 }, "live": false },
            { "rank": "10", "state": "io", "seconds_by_state": { "io": 3.0, "gpu": 1.0 }, "live": true },
            { "rank": "2", "state": "gpu", "seconds_by_state": { "gpu": 2.0, "warmup": 2.0 }, "live": true },
        ] });
        let read = sources(&doc);
        let ranks: Vec<_> = read.iter().map(|s| s.rank.as_deref().unwrap()).collect();
        assert_eq!(
            ranks,
            ["2", "10", "1"],
            "live first, then by rank as a number"
        );
        let view = render(&read, "http://x/metrics", Duration::from_secs(3));
        assert!(view.contains("2 rank(s), 3s"), "{view}");
        let row = |rank: &str| {
            view.lines()
                .find(|l| l.starts_with(&format!("{rank:<5} ")))
                .unwrap()
                .to_owned()
        };
        assert!(row("2").contains("gpu        50.0%"), "{view}");
        assert!(
            row("2").ends_with(&format!("50.0%  {}", "#".repeat(15))),
            "{view}"
        );
        assert!(row("10").contains("io         25.0%   75.0%"), "{view}");
        assert!(row("1").contains("gone"), "{view}");
        assert!(
            view.contains("share of time since each rank started: # gpu, = io, + cpu, . idle"),
            "a legend that reads as one: {view}"
        );
        assert!(sources(&serde_json::json!({})).is_empty());
    }
}

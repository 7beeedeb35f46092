//! Prometheus text exposition (format 0.0.4) of the two views.

use higgsmeter_catalog::{
    COLLECTOR_CHECKPOINTS, COLLECTOR_CONNECTIONS_REFUSED, COLLECTOR_EXPORT_DROPPED,
    COLLECTOR_EXPORT_QUEUE_DEPTH, COLLECTOR_EXPORTS, COLLECTOR_POINTS_RECEIVED,
    COLLECTOR_POINTS_REFUSED, COLLECTOR_REQUESTS, COLLECTOR_REQUESTS_REFUSED, COLLECTOR_SERIES,
    COLLECTOR_SOURCES, Family, WORKER_CURRENT_STATE, WORKER_SOURCES_IN_STATE,
};

use super::config::GaugeAggregation;
use super::naming::{escape_help, format_u64, format_value, render_labels};
use super::store::{FleetValue, Hist, Store, TARGET_INFO, Value};
use super::{RefusalReason, View};
use crate::self_metrics::{ExporterKind, RequestRefusal, SelfMetrics, Transport};

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    escape_help(help, out);
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

fn sample(out: &mut String, name: &str, suffix: &str, labels: &str, le: Option<f64>, value: f64) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        out.push_str(labels);
        if let Some(le) = le {
            if !labels.is_empty() {
                out.push(',');
            }
            out.push_str("le=\"");
            format_value(le, out);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    format_value(value, out);
    out.push('\n');
}

/// The `le` label of each bucket of the last bounds rendered, with what follows it
/// (`le="0.5"} `): histograms of a metric share their bounds, and float formatting
/// is the slow part of rendering.
#[derive(Default)]
struct LeCache {
    bounds: Vec<f64>,
    les: Vec<String>,
}

const LE_INF: &str = "le=\"+Inf\"} ";

impl LeCache {
    fn les(&mut self, bounds: &[f64]) -> &[String] {
        let same = self.les.len() == bounds.len() + 1
            && self.bounds.len() == bounds.len()
            && self
                .bounds
                .iter()
                .zip(bounds)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            self.bounds = bounds.to_vec();
            self.les = bounds
                .iter()
                .chain(std::iter::once(&f64::INFINITY))
                .map(|b| {
                    let mut s = String::from("le=\"");
                    format_value(*b, &mut s);
                    s.push_str("\"} ");
                    s
                })
                .collect();
        }
        &self.les
    }
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Hist, cache: &mut LeCache) {
    let les = cache.les(&h.bounds);
    let mut cumulative = 0u64;
    let counts: &[u64] = if h.counts.is_empty() {
        std::slice::from_ref(&h.count)
    } else {
        &h.counts
    };
    // `name_bucket{labels,` is written once and copied for the other buckets.
    let prefix_start = out.len();
    out.push_str(name);
    out.push_str("_bucket{");
    out.push_str(labels);
    if !labels.is_empty() {
        out.push(',');
    }
    let prefix = prefix_start..out.len();
    for (i, c) in counts.iter().enumerate() {
        cumulative = cumulative.saturating_add(*c);
        if i > 0 {
            out.extend_from_within(prefix.clone());
        }
        out.push_str(les.get(i).map_or(LE_INF, String::as_str));
        format_u64(cumulative, out);
        out.push('\n');
    }
    sample(out, name, "_sum", labels, None, h.sum);
    sample(out, name, "_count", labels, None, h.count as f64);
}

enum Row<'a> {
    Number(f64),
    Hist(&'a Hist),
}

/// One row of a view, before liveness and value checks.
#[derive(Clone, Copy)]
enum Entry {
    /// A per-source series.
    Series(u32),
    /// A fleet aggregate.
    Fleet(u32),
}

/// A view's rows in exposition order (metric name, then labels), valid while the
/// store's `layout` is `layout`; and the size of the last text rendered.
#[derive(Default)]
struct Order {
    layout: Option<u64>,
    entries: Vec<Entry>,
    last_len: usize,
}

/// What rendering keeps between scrapes (in the [`Store`]): sorting 100k label strings
/// on every GET cost more than formatting them.
#[derive(Default)]
pub(crate) struct RenderCache {
    fleet: Order,
    sources: Order,
}

impl Order {
    fn refresh(&mut self, store: &Store, view: View) {
        if self.layout == Some(store.layout) {
            return;
        }
        let series = store
            .series
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s)));
        self.entries.clear();
        match view {
            View::Fleet => {
                self.entries.extend(
                    series
                        .filter(|(_, s)| {
                            store.metrics[s.metric as usize].gauge_agg
                                == GaugeAggregation::PerSource
                        })
                        .map(|(i, _)| Entry::Series(i)),
                );
                self.entries
                    .extend((0..store.fleet.len() as u32).map(Entry::Fleet));
            }
            View::Sources => self.entries.extend(series.map(|(i, _)| Entry::Series(i))),
        }
        // The order the exposition has always had: metrics by name (then id); within
        // one, labels, then per-source series before fleet entries, then id.
        let key = |e: &Entry| -> (&str, u32, &str, u8, u32) {
            let (metric, labels, rank, i) = match *e {
                Entry::Series(i) => store.series[i as usize]
                    .as_ref()
                    .map_or((u32::MAX, "", 0, i), |s| {
                        (s.metric, s.labels.as_str(), 0, i)
                    }),
                Entry::Fleet(i) => {
                    let f = &store.fleet[i as usize];
                    (f.metric, f.labels.as_str(), 1, i)
                }
            };
            let name = store
                .metrics
                .get(metric as usize)
                .map_or("", |m| m.prom_name.as_str());
            (name, metric, labels, rank, i)
        };
        self.entries.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        self.layout = Some(store.layout);
    }
}

pub(crate) fn render(store: &Store, view: View, now: u64, stats: &SelfMetrics) -> String {
    let mut spare = RenderCache::default();
    let mut cached = store.render_cache.try_borrow_mut();
    let cache = match cached.as_deref_mut() {
        Ok(cache) => cache,
        Err(_) => &mut spare,
    };
    let order = match view {
        View::Fleet => &mut cache.fleet,
        View::Sources => &mut cache.sources,
    };
    order.refresh(store, view);
    let estimate = 64 * (store.series_held() + store.fleet.len()) + 4096;
    let mut out = output_buffer(if order.last_len > 0 {
        order.last_len + order.last_len / 16 + 4096
    } else {
        estimate
    });
    // Fleet gauges combined over live sources.
    let mut gauge_acc: Vec<Option<(f64, u64)>> = Vec::new();
    if view == View::Fleet {
        gauge_acc = vec![None; store.fleet.len()];
        for s in store.series.iter().flatten() {
            if !store.is_live(s.last_seen, now) {
                continue;
            }
            let metric = &store.metrics[s.metric as usize];
            let Value::Gauge { value, updated } = s.value else {
                continue;
            };
            if metric.gauge_agg == GaugeAggregation::PerSource {
                continue;
            }
            let acc = &mut gauge_acc[s.fleet as usize];
            *acc = Some(metric.gauge_agg.fold(*acc, value, updated));
        }
    }
    let mut les = LeCache::default();
    let mut current: Option<u32> = None;
    for entry in &order.entries {
        let (metric, labels, row) = match *entry {
            Entry::Series(i) => {
                let Some(s) = store.series.get(i as usize).and_then(Option::as_ref) else {
                    continue;
                };
                if !store.is_live(s.last_seen, now) {
                    continue;
                }
                let row = match (&s.value, view) {
                    (Value::Gauge { value, .. }, View::Fleet) => Row::Number(*value),
                    (_, View::Fleet) => continue,
                    (Value::Counter { value } | Value::Gauge { value, .. }, View::Sources) => {
                        Row::Number(*value)
                    }
                    (Value::Histogram(h), View::Sources) => Row::Hist(h),
                };
                (s.metric, s.labels.as_str(), row)
            }
            Entry::Fleet(i) => {
                let Some(f) = store.fleet.get(i as usize) else {
                    continue;
                };
                let row = match &f.value {
                    FleetValue::Counter(v) => Row::Number(*v),
                    FleetValue::Histogram(h) => Row::Hist(h),
                    FleetValue::Gauge => match gauge_acc.get(i as usize).copied().flatten() {
                        Some((v, _)) => Row::Number(v),
                        None => continue,
                    },
                };
                (f.metric, f.labels.as_str(), row)
            }
        };
        let Some(m) = store.metrics.get(metric as usize) else {
            continue;
        };
        if current != Some(metric) {
            current = Some(metric);
            header(&mut out, &m.prom_name, &m.help, m.kind.as_str());
        }
        match row {
            Row::Number(v) => sample(&mut out, &m.prom_name, "", labels, None, v),
            Row::Hist(h) => histogram(&mut out, &m.prom_name, labels, h, &mut les),
        }
    }
    if view == View::Fleet {
        sources_in_state(store, now, &mut out);
        self_metrics(store, now, stats, &mut out);
    }
    target_info(store, now, &mut out);
    order.last_len = out.len();
    out
}

/// An empty `String` of `capacity` bytes. Large ones are marked for transparent huge
/// pages where the kernel offers them on request: writing 60 MB of exposition into
/// fresh 4 KiB pages spent more time in page faults than in rendering (about 30 ms
/// against 7 ms with 2 MiB pages on the 2-core benchmark VM).
fn output_buffer(capacity: usize) -> String {
    let mut buf = Vec::<u8>::with_capacity(capacity);
    #[cfg(target_os = "linux")]
    advise_huge_pages(&mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(buf: &mut Vec<u8>) {
    const HUGE_PAGE: usize = 2 << 20;
    if buf.capacity() < 4 * HUGE_PAGE {
        return;
    }
    let start = buf.as_mut_ptr() as usize;
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start + buf.capacity()) / HUGE_PAGE * HUGE_PAGE;
    if end <= first {
        return;
    }
    #[allow(
        unsafe_code,
        reason = "madvise only changes how the kernel backs pages of this allocation \
                  (whole 2 MiB pages inside it); it reads and writes no memory"
    )]
    // SAFETY: [first, end) lies inside `buf`'s allocation, which outlives the call;
    // MADV_HUGEPAGE keeps the contents. Failure (THP off) is harmless and ignored.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

fn with_static(store: &Store, pairs: &[(&str, &str)]) -> String {
    let mut labels: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.extend(store.static_labels.iter().cloned());
    labels.sort();
    render_labels(&labels)
}

fn sources_in_state(store: &Store, now: u64, out: &mut String) {
    let Some(metric) = store
        .metrics
        .iter()
        .position(|m| m.otel_name == WORKER_CURRENT_STATE.name)
    else {
        return;
    };
    let mut counts = [0u64; 7];
    for s in store.series.iter().flatten() {
        if s.metric as usize != metric || !store.is_live(s.last_seen, now) {
            continue;
        }
        if let Value::Gauge { value, .. } = s.value
            && (0.0..7.0).contains(&value)
        {
            counts[value as usize] += 1;
        }
    }
    let f = WORKER_SOURCES_IN_STATE;
    header(out, f.name, f.help, f.kind.as_str());
    for state in higgsmeter_catalog::STATES {
        let labels = with_static(store, &[(f.labels[0], state.name)]);
        sample(
            out,
            f.name,
            "",
            &labels,
            None,
            counts[usize::from(state.code)] as f64,
        );
    }
}

fn family(out: &mut String, f: &Family) {
    header(out, f.name, f.help, f.kind.as_str());
}

fn self_metrics(store: &Store, now: u64, stats: &SelfMetrics, out: &mut String) {
    let get = SelfMetrics::get;
    family(out, &COLLECTOR_CHECKPOINTS);
    for (i, outcome) in ["ok", "failed"].into_iter().enumerate() {
        let l = with_static(store, &[(COLLECTOR_CHECKPOINTS.labels[0], outcome)]);
        sample(
            out,
            COLLECTOR_CHECKPOINTS.name,
            "",
            &l,
            None,
            get(&stats.checkpoints[i]) as f64,
        );
    }
    family(out, &COLLECTOR_CONNECTIONS_REFUSED);
    for t in Transport::ALL {
        let l = with_static(
            store,
            &[(COLLECTOR_CONNECTIONS_REFUSED.labels[0], t.as_str())],
        );
        sample(
            out,
            COLLECTOR_CONNECTIONS_REFUSED.name,
            "",
            &l,
            None,
            get(&stats.connections_refused[t as usize]) as f64,
        );
    }
    family(out, &COLLECTOR_EXPORT_DROPPED);
    for e in ExporterKind::ALL {
        let l = with_static(store, &[(COLLECTOR_EXPORT_DROPPED.labels[0], e.as_str())]);
        sample(
            out,
            COLLECTOR_EXPORT_DROPPED.name,
            "",
            &l,
            None,
            get(&stats.export_dropped[e as usize]) as f64,
        );
    }
    family(out, &COLLECTOR_EXPORT_QUEUE_DEPTH);
    for e in ExporterKind::ALL {
        let l = with_static(
            store,
            &[(COLLECTOR_EXPORT_QUEUE_DEPTH.labels[0], e.as_str())],
        );
        sample(
            out,
            COLLECTOR_EXPORT_QUEUE_DEPTH.name,
            "",
            &l,
            None,
            get(&stats.queue_depth[e as usize]) as f64,
        );
    }
    family(out, &COLLECTOR_EXPORTS);
    for e in ExporterKind::ALL {
        for (outcome, v) in [
            ("failed", &stats.exports_failed[e as usize]),
            ("ok", &stats.exports_ok[e as usize]),
        ] {
            let l = with_static(
                store,
                &[
                    (COLLECTOR_EXPORTS.labels[0], e.as_str()),
                    (COLLECTOR_EXPORTS.labels[1], outcome),
                ],
            );
            sample(out, COLLECTOR_EXPORTS.name, "", &l, None, get(v) as f64);
        }
    }
    family(out, &COLLECTOR_POINTS_RECEIVED);
    for t in Transport::ALL {
        let l = with_static(store, &[(COLLECTOR_POINTS_RECEIVED.labels[0], t.as_str())]);
        sample(
            out,
            COLLECTOR_POINTS_RECEIVED.name,
            "",
            &l,
            None,
            get(&stats.points_received[t as usize]) as f64,
        );
    }
    family(out, &COLLECTOR_POINTS_REFUSED);
    for r in RefusalReason::ALL {
        let l = with_static(store, &[(COLLECTOR_POINTS_REFUSED.labels[0], r.as_str())]);
        sample(
            out,
            COLLECTOR_POINTS_REFUSED.name,
            "",
            &l,
            None,
            get(&stats.points_refused[r as usize]) as f64,
        );
    }
    family(out, &COLLECTOR_REQUESTS_REFUSED);
    for t in Transport::ALL {
        for r in RequestRefusal::ALL {
            let l = with_static(
                store,
                &[
                    (COLLECTOR_REQUESTS_REFUSED.labels[0], t.as_str()),
                    (COLLECTOR_REQUESTS_REFUSED.labels[1], r.as_str()),
                ],
            );
            sample(
                out,
                COLLECTOR_REQUESTS_REFUSED.name,
                "",
                &l,
                None,
                get(&stats.requests_refused[t as usize][r as usize]) as f64,
            );
        }
    }
    family(out, &COLLECTOR_REQUESTS);
    for t in Transport::ALL {
        let l = with_static(store, &[(COLLECTOR_REQUESTS.labels[0], t.as_str())]);
        sample(
            out,
            COLLECTOR_REQUESTS.name,
            "",
            &l,
            None,
            get(&stats.requests[t as usize]) as f64,
        );
    }
    family(out, &COLLECTOR_SERIES);
    for (view, n) in [
        ("fleet", store.fleet.len()),
        ("source", store.series_held()),
    ] {
        let l = with_static(store, &[(COLLECTOR_SERIES.labels[0], view)]);
        sample(out, COLLECTOR_SERIES.name, "", &l, None, n as f64);
    }
    family(out, &COLLECTOR_SOURCES);
    let l = with_static(store, &[]);
    sample(
        out,
        COLLECTOR_SOURCES.name,
        "",
        &l,
        None,
        store.live_sources(now) as f64,
    );
}

fn target_info(store: &Store, now: u64, out: &mut String) {
    let mut live: Vec<&str> = store
        .sources
        .iter()
        .flatten()
        .filter(|s| store.is_live(s.last_seen, now))
        .map(|s| s.target_info.as_str())
        .collect();
    if live.is_empty() {
        return;
    }
    live.sort_unstable();
    live.dedup();
    header(out, TARGET_INFO, "Target metadata", "gauge");
    for labels in live {
        sample(out, TARGET_INFO, "", labels, None, 1.0);
    }
}

/// Rewrites text exposition 0.0.4 as OpenMetrics 1.0: counter families are named
/// without `_total` (their samples with it), `target_info` is an `info` family, `"` is
/// escaped in HELP, and the text ends with `# EOF`.
pub(crate) fn to_openmetrics(text: &str) -> String {
    let mut out = output_buffer(text.len() + 64);
    let mut pending_help: Option<(&str, &str)> = None;
    // The current counter family: (name as in the text, OpenMetrics family name).
    let mut counter: Option<(&str, &str)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            pending_help = Some((name, help));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let (family, kind) = match kind {
                "counter" => {
                    let family = name.strip_suffix("_total").unwrap_or(name);
                    counter = Some((name, family));
                    (family, kind)
                }
                _ if name == TARGET_INFO => {
                    counter = None;
                    ("target", "info")
                }
                _ => {
                    counter = None;
                    (name, kind)
                }
            };
            if let Some((help_name, help)) = pending_help.take()
                && help_name == name
            {
                out.push_str("# HELP ");
                out.push_str(family);
                out.push(' ');
                for c in help.chars() {
                    if c == '"' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(family);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
            continue;
        }
        match counter {
            Some((name, family)) if !name.ends_with("_total") => {
                if let Some(rest) = line.strip_prefix(name) {
                    out.push_str(family);
                    out.push_str("_total");
                    out.push_str(rest);
                    out.push('\n');
                    continue;
                }
                out.push_str(line);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out.push_str("# EOF\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_output_buffers_hold_what_is_written() {
        let mut out = output_buffer(24 << 20);
        assert!(out.is_empty() && out.capacity() >= 24 << 20);
        let line = "h_bucket{job=\"w\",le=\"0.5\"} 12\n";
        while out.len() + line.len() <= 24 << 20 {
            out.push_str(line);
        }
        assert!(out.lines().all(|l| format!("{l}\n") == line));
    }
}

//! Fair limits (ADR 0020): quotas per source, overflow instead of refusal, the budget.

use super::*;

/// `n` cumulative counter points of `c`, attribute `i` = 0..n, each at `v`.
fn points(n: u32, time: u64, v: f64) -> Vec<NumberDataPoint> {
    (0..n)
        .map(|i| point(vec![kv("i", &i.to_string())], 1, time, v))
        .collect()
}

/// The value of the line of `text` that starts with `series` (name and labels).
fn value_of(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn quota(per_metric: usize) -> AggregateConfig {
    AggregateConfig {
        max_series_per_source_metric: per_metric,
        ..config()
    }
}

/// A source whose labels run away keeps its quota and folds the rest into one overflow
/// series; a healthy source beside it gets every new series; the fleet total equals the
/// sources' own totals at every step, across a restart.
#[test]
fn a_runaway_source_folds_into_its_overflow_and_the_others_are_never_refused() {
    let mut s = Store::new(quota(3));
    let round = |s: &mut Store, time: u64, v: f64, now: u64| {
        let bad = request(worker(0), vec![counter("c", false, points(10, time, v))]);
        let good = request(worker(1), vec![counter("c", false, points(3, time, v))]);
        let a = ingest(s, &bad, now);
        let b = ingest(s, &good, now);
        assert_eq!(a.refused_total() + b.refused_total(), 0, "{a:?} {b:?}");
    };
    round(&mut s, 2, 1.0, SEC);
    // Rank 0: 3 series and its overflow; rank 1: its 3.
    assert_eq!(s.series_held(), 7);
    assert_eq!(fleet_counter(&s, "c"), 13.0);
    round(&mut s, 3, 2.0, 2 * SEC);
    assert_eq!(fleet_counter(&s, "c"), 26.0);
    let sources = render(&s, View::Sources, 2 * SEC);
    assert_eq!(
        value_of(
            &sources,
            r#"c_total{instance="id-0",job="w",otel_metric_overflow="true",rank="0"}"#
        ),
        Some(14.0),
        "{sources}"
    );
    let fleet = render(&s, View::Fleet, 2 * SEC);
    assert_eq!(
        value_of(&fleet, r#"c_total{job="w",otel_metric_overflow="true"}"#),
        Some(14.0),
        "{fleet}"
    );
    // Who overflowed: rank 0, in metric c_total, 14 points.
    assert_eq!(
        value_of(
            &fleet,
            r#"higgsmeter_collector_overflow_points_total{instance="id-0",job="w",metric="c_total",rank="0"}"#
        ),
        Some(14.0),
        "{fleet}"
    );
    assert!(!fleet.contains(r#"metric="c_total",rank="1""#), "{fleet}");
    // A restart keeps the folded streams: the next points add what they grew by.
    let mut r = restart(&s, quota(3), 2 * SEC, SEC);
    round(&mut r, 4, 3.0, 3 * SEC);
    assert_eq!(fleet_counter(&r, "c"), 39.0);
    assert_eq!(r.series_held(), 7);
    // A restarted rank 0 (a new start time) counts its new incarnation in full.
    let again = request(
        worker(0),
        vec![counter(
            "c",
            false,
            (0..10)
                .map(|i| point(vec![kv("i", &i.to_string())], 9, 10, 1.0))
                .collect(),
        )],
    );
    assert_eq!(ingest(&mut r, &again, 4 * SEC).refused_total(), 0);
    assert_eq!(fleet_counter(&r, "c"), 49.0);
}

/// Delta counters fold by adding; a retried export of a folded delta stream does not
/// count twice.
#[test]
fn folded_deltas_add_once() {
    let mut s = Store::new(quota(1));
    let req = |start: u64, time: u64| {
        request(
            worker(0),
            vec![counter(
                "d",
                true,
                (0..4)
                    .map(|i| point(vec![kv("i", &i.to_string())], start, time, 2.0))
                    .collect(),
            )],
        )
    };
    ingest(&mut s, &req(1, 2), SEC);
    ingest(&mut s, &req(1, 2), SEC); // a retry
    ingest(&mut s, &req(2, 3), SEC);
    assert_eq!(fleet_counter(&s, "d"), 16.0);
}

/// Histograms fold bucket-wise and summed gauges by their values: the fleet's figures
/// are what they would be without a quota.
#[test]
fn folded_histograms_and_summed_gauges_stay_exact() {
    let with_attr = |mut m: Metric, i: u32| {
        if let Some(Data::Histogram(h)) = &mut m.data {
            h.data_points[0].attributes = vec![kv("i", &i.to_string())];
        }
        m
    };
    let mut s = Store::new(quota(1));
    let hists = |counts: [u64; 3], time: u64| {
        (0..3)
            .map(|i| with_attr(histogram("h", &[1.0, 2.0], &counts, 1.0, 1, time), i))
            .collect::<Vec<_>>()
    };
    for m in hists([1, 0, 2], 2) {
        assert_eq!(
            ingest(&mut s, &request(worker(0), vec![m]), SEC).refused_total(),
            0
        );
    }
    for m in hists([2, 1, 2], 3) {
        ingest(&mut s, &request(worker(0), vec![m]), SEC);
    }
    let fleet = render(&s, View::Fleet, SEC);
    // Three streams of 5 observations, one series and two folded.
    assert_eq!(
        value_of(&fleet, r#"h_count{i="0",job="w"}"#),
        Some(5.0),
        "{fleet}"
    );
    assert_eq!(
        value_of(&fleet, r#"h_count{job="w",otel_metric_overflow="true"}"#),
        Some(10.0),
        "{fleet}"
    );
    assert_eq!(
        value_of(
            &fleet,
            r#"h_bucket{job="w",otel_metric_overflow="true",le="1"}"#
        ),
        Some(4.0),
        "{fleet}"
    );
    // A folded stream with other bounds is refused, never mixed.
    let other = with_attr(histogram("h", &[5.0], &[1, 1], 1.0, 1, 4), 7);
    let out = ingest(&mut s, &request(worker(0), vec![other]), SEC);
    assert_eq!(out.refused[RefusalReason::HistogramBounds as usize], 1);

    let queue = |vals: [f64; 3], time: u64| {
        request(
            worker(0),
            vec![gauge(
                "queue",
                (0..3)
                    .map(|i| point(vec![kv("i", &i.to_string())], 0, time, vals[i]))
                    .collect(),
            )],
        )
    };
    ingest(&mut s, &queue([1.0, 2.0, 3.0], 2), SEC);
    let total = |s: &Store| {
        let fleet = render(s, View::Fleet, SEC);
        fleet
            .lines()
            .filter(|l| l.starts_with("queue{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert_eq!(total(&s), 6.0);
    ingest(&mut s, &queue([2.0, 2.0, 0.5], 3), SEC);
    assert_eq!(total(&s), 4.5);
}

/// A point that is already an overflow series' (an SDK past its own cardinality limit,
/// or a lower collector's export) is folded as a stream of its own: its cumulative
/// value is never taken for ours.
#[test]
fn a_marked_overflow_stream_is_folded_not_mixed() {
    let mut s = Store::new(quota(2));
    let marked = |v: f64, time: u64| {
        let mut p = point(vec![], 1, time, v);
        p.attributes = vec![KeyValue {
            key: "otel.metric.overflow".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            }),
            ..Default::default()
        }];
        let mut pts = points(5, time, v);
        pts.push(p);
        request(worker(0), vec![counter("c", false, pts)])
    };
    ingest(&mut s, &marked(5.0, 2), SEC);
    // 2 series at 5, 3 folded at 5, the marked stream at 5.
    assert_eq!(fleet_counter(&s, "c"), 30.0);
    ingest(&mut s, &marked(8.0, 3), SEC);
    assert_eq!(fleet_counter(&s, "c"), 48.0);
    assert_eq!(s.series_held(), 3);
}

/// The budget takes a new source only while it has room for the source's reserve:
/// past it new sources are refused with a message that says what to raise, the live
/// ones go on, and once silent sources go stale their room is given to new ones.
#[test]
fn the_budget_refuses_new_sources_and_keeps_live_ones() {
    let cfg = AggregateConfig {
        max_series: Some(40),
        reserved_series_per_source: 8,
        max_series_per_source: 16,
        max_series_per_source_metric: 16,
        ..config()
    };
    let mut s = Store::new(cfg);
    let one = |rank: u32, time: u64| {
        request(
            worker(rank),
            vec![counter("c", false, vec![point(vec![], 1, time, 1.0)])],
        )
    };
    // Each source holds 1 series and owes 7 of its reserve; the fleet entry is shared.
    for rank in 0..4 {
        assert_eq!(ingest(&mut s, &one(rank, 2), SEC).refused_total(), 0);
    }
    let out = ingest(&mut s, &one(4, 2), SEC);
    assert_eq!(out.refused[RefusalReason::Cardinality as usize], 1);
    let msg = out.first_message.unwrap_or_default();
    assert!(
        msg.contains("new source refused") && msg.contains("memory_limit_mib"),
        "{msg}"
    );
    // A live source below its reserve gets its new series however full the budget is.
    let more = request(worker(0), vec![counter("c", false, points(7, 3, 1.0))]);
    assert_eq!(ingest(&mut s, &more, SEC).refused_total(), 0);
    assert_eq!(fleet_counter(&s, "c"), 11.0);
    // Sources 1-3 fall silent; past stale_after their room goes to a new source, and
    // what they counted stays counted.
    for now in [2 * SEC, 4 * SEC] {
        ingest(&mut s, &more, now);
    }
    let out = ingest(&mut s, &one(4, 2), 10 * SEC);
    assert_eq!(out.refused_total(), 0, "{out:?}");
    assert_eq!(fleet_counter(&s, "c"), 12.0);
}

/// Past `max_series_per_source` a source's new series of any metric fold too; one
/// source's overflow never takes from another's quota.
#[test]
fn the_per_source_quota_folds_every_metric() {
    let cfg = AggregateConfig {
        max_series_per_source: 4,
        max_series_per_source_metric: 4,
        reserved_series_per_source: 2,
        ..config()
    };
    let mut s = Store::new(cfg);
    let req = request(
        worker(0),
        vec![
            counter("a", false, points(3, 2, 1.0)),
            counter("b", false, points(3, 2, 1.0)),
        ],
    );
    assert_eq!(ingest(&mut s, &req, SEC).refused_total(), 0);
    assert_eq!(fleet_counter(&s, "a") + fleet_counter(&s, "b"), 6.0);
    // a: 3 series + its overflow (4 = the quota); b: only its overflow.
    assert_eq!(s.series_held(), 5);
    let req = request(worker(1), vec![counter("b", false, points(3, 2, 1.0))]);
    assert_eq!(ingest(&mut s, &req, SEC).refused_total(), 0);
    assert_eq!(s.series_held(), 8);
}

/// The checkpoint writes folded streams (numbers and histograms) byte for byte as
/// prost does, and they come back: the restored store renders as the original.
#[test]
fn folded_streams_are_checkpointed_as_prost_writes_them() {
    let mut s = Store::new(quota(1));
    ingest(
        &mut s,
        &request(worker(0), vec![counter("c", false, points(4, 2, 1.5))]),
        SEC,
    );
    for i in 0..3 {
        let mut m = histogram("h", &[1.0], &[1, 2], 3.0, 1, 2);
        if let Some(Data::Histogram(h)) = &mut m.data {
            h.data_points[0].attributes = vec![kv("i", &i.to_string())];
        }
        ingest(&mut s, &request(worker(0), vec![m]), SEC);
    }
    let copy = s.checkpoint(SEC);
    let mut state = copy.to_state();
    state.instance_id = "x".into();
    state.origin_unix_nanos = 1;
    state.written_unix_nanos = 2;
    assert_eq!(copy.encode("x", 1, 2), state.encode());
    assert!(
        copy.encode("x", 1, 2).len()
            > Store::new(quota(1)).checkpoint(SEC).encode("x", 1, 2).len() + 6 * 20,
        "the folded streams are in the file"
    );
    // The collector's own counters start over with the process (as every
    // `higgsmeter_collector_*` counter does); everything else renders as before.
    let without_own = |text: String| {
        text.lines()
            .filter(|l| !l.starts_with("higgsmeter_collector_overflow_points_total{"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let r = restart(&s, quota(1), SEC, 0);
    for view in [View::Fleet, View::Sources] {
        assert_eq!(
            without_own(render(&r, view, SEC)),
            without_own(render(&s, view, SEC)),
            "{view:?}"
        );
    }
    // The next points add only what each folded stream grew by.
    let mut r = r;
    ingest(
        &mut r,
        &request(worker(0), vec![counter("c", false, points(4, 3, 2.0))]),
        2 * SEC,
    );
    assert_eq!(fleet_counter(&r, "c"), 8.0);
}

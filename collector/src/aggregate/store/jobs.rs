//! The job view's read side: under the aggregator's lock, every source that belongs to
//! a job (a `job.id` resource attribute), with its activity seconds, the time of its
//! last activity point and its progress marks (`higgsmeter_catalog::JOB_FAMILIES`).
//! The job ledger (`views::jobs`) keeps what it reads after the source is forgotten.

use std::collections::HashMap;

use higgsmeter_catalog::{
    JOB_BADPUT, JOB_CHECKPOINT_PRODUCTIVE, JOB_CHECKPOINT_STEP, JOB_DISRUPTIONS, JOB_GOODPUT,
    JOB_GOODPUT_RATIO, JOB_ID_ATTRIBUTE, JOB_INCARNATION_ATTRIBUTE, JOB_RESTORED_STEP, JOB_STEP,
    JOB_TIME, WORKER_ACTIVITY_TIME,
};

use super::read::with_static;
use super::{Store, Value, value_string};
use crate::views::jobs::{JobSourceReading, JobSummary};
use crate::views::rows::{RowValue, Rows};

/// Every job source the store holds, read at `now` (monotonic ns). Cheap when no source
/// carries a `job.id`: the series are scanned only when one does.
pub(crate) fn job_read(store: &Store, now: u64) -> Vec<JobSourceReading> {
    let mut by_id: HashMap<u32, JobSourceReading> = HashMap::new();
    for (id, src) in store.sources.iter().enumerate() {
        let Some(src) = src else { continue };
        let Ok(id) = u32::try_from(id) else { continue };
        let get = |key: &str| {
            src.resource
                .iter()
                .find(|kv| kv.key == key)
                .map(|kv| value_string(kv.value.as_ref()).into_owned())
        };
        let Some(job_id) = get(JOB_ID_ATTRIBUTE).filter(|j| !j.is_empty()) else {
            continue;
        };
        let instance = get("service.instance.id").unwrap_or_else(|| {
            let mut attrs: Vec<String> = src
                .resource
                .iter()
                .map(|kv| format!("{}={}", kv.key, value_string(kv.value.as_ref())))
                .collect();
            attrs.sort();
            attrs.join("\u{1f}")
        });
        by_id.insert(
            id,
            JobSourceReading {
                job_id,
                rank: get("rank").unwrap_or_default(),
                incarnation: get(JOB_INCARNATION_ATTRIBUTE).and_then(|v| v.parse().ok()),
                instance,
                seconds: Vec::new(),
                time_unix_nanos: 0,
                step: None,
                checkpoint_step: None,
                checkpoints: Vec::new(),
                restored_step: None,
                live: store.is_live(src.last_seen(), now),
            },
        );
    }
    if by_id.is_empty() {
        return Vec::new();
    }
    // Which metric ids matter: 0 activity, 1..=4 the progress marks.
    let role: Vec<Option<u8>> = store
        .metrics
        .iter()
        .map(|m| match m.otel_name.as_str() {
            n if n == WORKER_ACTIVITY_TIME.name => Some(0),
            n if n == JOB_STEP.name => Some(1),
            n if n == JOB_CHECKPOINT_STEP.name => Some(2),
            n if n == JOB_CHECKPOINT_PRODUCTIVE.name => Some(3),
            n if n == JOB_RESTORED_STEP.name => Some(4),
            _ => None,
        })
        .collect();
    for s in store.series.iter().flatten() {
        let Some(Some(role)) = role.get(s.metric as usize) else {
            continue;
        };
        let Some(entry) = by_id.get_mut(&s.source) else {
            continue;
        };
        let state = s.state();
        match (role, &state.value) {
            (0, Value::Counter { value }) => {
                let st = if s.overflow {
                    "overflow"
                } else {
                    s.attr("state").unwrap_or("")
                };
                let op = s.attr("operation").unwrap_or("");
                entry.seconds.push((st.to_owned(), op.to_owned(), *value));
                entry.time_unix_nanos = entry.time_unix_nanos.max(state.time);
            }
            (3, Value::Gauge { value, .. }) if value.is_finite() => {
                let step = s.attr("step").and_then(|v| v.parse::<f64>().ok());
                entry.checkpoints.push((step, *value));
            }
            (1 | 2 | 4, Value::Gauge { value, .. }) if value.is_finite() => {
                let slot = match role {
                    1 => &mut entry.step,
                    2 => &mut entry.checkpoint_step,
                    _ => &mut entry.restored_step,
                };
                *slot = Some(*value);
            }
            _ => {}
        }
    }
    let mut out: Vec<JobSourceReading> = by_id.into_values().collect();
    out.sort_by(|a, b| (&a.job_id, &a.rank, &a.instance).cmp(&(&b.job_id, &b.rank, &b.instance)));
    out
}

/// The job view's families (`higgsmeter_catalog::JOB_VIEW_FAMILIES`) for the fleet
/// view, one series per job (per cause for badput), with the static labels.
pub(crate) fn job_rows(store: &Store, jobs: &[JobSummary], out: &mut Rows) {
    if jobs.is_empty() {
        return;
    }
    let simple = [
        (
            &JOB_TIME,
            (|j: &JobSummary| j.time_seconds) as fn(&JobSummary) -> f64,
        ),
        (&JOB_GOODPUT, |j| j.goodput_seconds),
        (&JOB_GOODPUT_RATIO, |j| j.goodput_ratio),
        (&JOB_DISRUPTIONS, |j| j.disruptions as f64),
    ];
    for (family, value) in simple {
        out.push_family(family.name, family.help, family.kind.into(), jobs.len());
        for j in jobs {
            let labels = with_static(store, &[("job_id", &j.job_id)]);
            out.push_row(&labels, RowValue::Number(value(j)));
        }
    }
    let rows = jobs.iter().map(|j| j.badput_seconds.len()).sum();
    out.push_family(
        JOB_BADPUT.name,
        JOB_BADPUT.help,
        JOB_BADPUT.kind.into(),
        rows,
    );
    for j in jobs {
        for (cause, secs) in &j.badput_seconds {
            let labels = with_static(store, &[("job_id", &j.job_id), ("cause", cause)]);
            out.push_row(&labels, RowValue::Number(*secs));
        }
    }
}

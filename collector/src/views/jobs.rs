//! The job view: where a training job's time went, per job, across every incarnation
//! of every rank (ADR 0021).
//!
//! Every second the aggregator reads the sources that carry a `job.id`
//! ([`JobSourceReading`], under its lock) into the [`JobLedger`], which keeps one
//! record per incarnation of each rank: its activity seconds, when its counting began
//! and when its last point was taken, its last step, the checkpoints it saved and the
//! step it restored. The ledger outlives the sources (a dead rank is forgotten by the
//! store after `forget_after`; its incarnation stays here) and is checkpointed with the
//! aggregation state.
//!
//! [`JobLedger::view`] derives each job's figures from it, per rank, and sums them:
//!
//! - **time**: each incarnation's tracked seconds (counting began to its last point)
//!   plus the gaps between a rank's consecutive incarnations;
//! - **goodput**: `gpu` seconds, less the wasted progress;
//! - **badput** by cause: `startup`; `initialization` (`warmup`); `data_loading`
//!   (`io`); `checkpoint_save` and `checkpoint_restore` (those operations, any
//!   state); `waiting` (`idle`: at a collective, or for work); `custom` (operations
//!   `badput.*`); `other` (`cpu`, `shutdown`, overflow); `wasted_progress`: of an
//!   incarnation followed by another, the `gpu` seconds after the last checkpoint it
//!   saved at or before the step the next one restored (all of them when it saved
//!   none, or the next one restored nothing); `recovery`: the gaps, from the end of an
//!   incarnation's tracked time (its last point, or the `finalize()` before it) to the
//!   next one's begin.
//!
//! Goodput plus every cause equals the time, by construction.

use std::collections::BTreeMap;

use higgsmeter_catalog::{
    BADPUT_CAUSES, CHECKPOINT_RESTORE_OPERATION, CHECKPOINT_SAVE_OPERATION, CUSTOM_BADPUT_PREFIX,
};
use serde::{Deserialize, Serialize};

/// One job's source (one incarnation of one rank) as read from the store at one
/// instant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobSourceReading {
    /// The `job.id` resource attribute.
    pub(crate) job_id: String,
    /// The `rank` resource attribute (empty when absent).
    pub(crate) rank: String,
    /// The `job.incarnation` resource attribute, when it is a number.
    pub(crate) incarnation: Option<u64>,
    /// What tells this process apart from the rank's other incarnations:
    /// `service.instance.id`, else every resource attribute.
    pub(crate) instance: String,
    /// Activity seconds per (state, operation) (an overflow series' as state
    /// `overflow`).
    pub(crate) seconds: Vec<(String, String, f64)>,
    /// The latest activity point's time (unix ns, the worker's clock); 0 when none.
    pub(crate) time_unix_nanos: u64,
    /// `higgsmeter_job_step`.
    pub(crate) step: Option<f64>,
    /// `higgsmeter_job_checkpoint_step`.
    pub(crate) checkpoint_step: Option<f64>,
    /// `higgsmeter_job_checkpoint_productive_seconds`: (its `step` label, or the
    /// checkpoint step when it has none; the seconds).
    pub(crate) checkpoints: Vec<(Option<f64>, f64)>,
    /// `higgsmeter_job_restored_step`.
    pub(crate) restored_step: Option<f64>,
    /// Whether it pushed within `stale_after`.
    pub(crate) live: bool,
}

/// One incarnation of one rank, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Incarnation {
    /// `service.instance.id` (or the whole resource).
    pub(crate) instance: String,
    /// The declared `job.incarnation`, if any.
    pub(crate) incarnation: Option<u64>,
    /// When its counting began (unix ns): its last point's time less its tracked
    /// seconds.
    pub(crate) begin_unix_nanos: u64,
    /// Where its tracked time ends (unix ns): its begin plus its tracked seconds at its
    /// last point (that point's time, or the `finalize()` before it).
    pub(crate) end_unix_nanos: u64,
    /// Activity seconds per (state, operation) at its last point.
    pub(crate) seconds: Vec<(String, String, f64)>,
    /// Its last step, if it reported steps.
    pub(crate) step: Option<f64>,
    /// The checkpoints it saved: (step, its `gpu` seconds at the save), in order.
    pub(crate) checkpoints: Vec<(f64, f64)>,
    /// The step it restored at its start, if any.
    pub(crate) restored_step: Option<f64>,
    /// Whether it pushed within `stale_after` at the last update (not kept across a
    /// collector restart: false until it pushes again).
    #[serde(skip)]
    pub(crate) live: bool,
}

impl Incarnation {
    fn tracked(&self) -> f64 {
        self.seconds.iter().map(|(_, _, s)| s).sum()
    }

    fn gpu(&self) -> f64 {
        self.seconds
            .iter()
            .filter(|(st, op, _)| st == "gpu" && cause_of(st, op) == Cause::Productive)
            .map(|(_, _, s)| s)
            .sum()
    }
}

/// Every job's incarnations, per rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobLedger {
    /// job id → rank → incarnations, in the order first seen.
    jobs: BTreeMap<String, BTreeMap<String, Vec<Incarnation>>>,
}

/// What a (state, operation)'s seconds count as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Productive,
    Badput(usize),
}

fn badput(name: &str) -> Cause {
    Cause::Badput(
        BADPUT_CAUSES
            .iter()
            .position(|c| *c == name)
            .unwrap_or(BADPUT_CAUSES.len() - 1),
    )
}

fn cause_of(state: &str, operation: &str) -> Cause {
    if operation == CHECKPOINT_SAVE_OPERATION {
        return badput("checkpoint_save");
    }
    if operation == CHECKPOINT_RESTORE_OPERATION {
        return badput("checkpoint_restore");
    }
    if operation.starts_with(CUSTOM_BADPUT_PREFIX) {
        return badput("custom");
    }
    match state {
        "gpu" => Cause::Productive,
        "startup" => badput("startup"),
        "warmup" => badput("initialization"),
        "io" => badput("data_loading"),
        "idle" => badput("waiting"),
        _ => badput("other"),
    }
}

/// One job's figures, summed over its ranks (seconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct JobSummary {
    /// The job id.
    pub(crate) job_id: String,
    /// Every rank's time, first start to last point, across incarnations.
    pub(crate) time_seconds: f64,
    /// Productive `gpu` seconds.
    pub(crate) goodput_seconds: f64,
    /// `goodput_seconds / time_seconds` (0 with no time).
    pub(crate) goodput_ratio: f64,
    /// Badput seconds per cause, in [`BADPUT_CAUSES`] order (every cause present).
    pub(crate) badput_seconds: Vec<(String, f64)>,
    /// Restarts seen (incarnations less one, on the rank with the most).
    pub(crate) disruptions: u64,
    /// Per rank, numerically ordered where ranks are numbers.
    pub(crate) ranks: Vec<RankSummary>,
}

/// One rank of a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RankSummary {
    /// The `rank` attribute.
    pub(crate) rank: String,
    /// Its time, goodput and badput, as the job's.
    pub(crate) time_seconds: f64,
    /// Productive `gpu` seconds.
    pub(crate) goodput_seconds: f64,
    /// Badput seconds per cause.
    pub(crate) badput_seconds: Vec<(String, f64)>,
    /// Its incarnations, in order.
    pub(crate) incarnations: Vec<IncarnationSummary>,
}

/// One incarnation, as `/api/jobs` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct IncarnationSummary {
    /// The declared `job.incarnation`, else its position (0, 1, ...).
    pub(crate) incarnation: u64,
    /// When its counting began and its last point (unix seconds).
    pub(crate) begin_unix_s: f64,
    /// Its last point (unix seconds).
    pub(crate) end_unix_s: f64,
    /// Whether it still pushes.
    pub(crate) live: bool,
    /// Its tracked seconds.
    pub(crate) tracked_seconds: f64,
    /// Its `gpu` seconds redone by a later incarnation.
    pub(crate) wasted_seconds: f64,
    /// The gap after it, to the next incarnation's start.
    pub(crate) recovery_seconds: f64,
    /// Its last step.
    pub(crate) step: Option<f64>,
    /// The step it restored.
    pub(crate) restored_step: Option<f64>,
}

fn rank_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<i64>(), b.parse::<i64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

impl JobLedger {
    /// Takes one reading: each source updates its incarnation's record (made on first
    /// sight). A checkpoint step that changed since the last reading is added to the
    /// incarnation's checkpoints with its productive seconds.
    pub(crate) fn update(&mut self, readings: &[JobSourceReading]) {
        for rec in self
            .jobs
            .values_mut()
            .flat_map(|r| r.values_mut())
            .flatten()
        {
            rec.live = false;
        }
        for r in readings {
            if r.time_unix_nanos == 0 {
                continue; // no activity point yet: nothing to place it in time by
            }
            let tracked: f64 = r.seconds.iter().map(|(_, _, s)| s).sum();
            let incarnations = self
                .jobs
                .entry(r.job_id.clone())
                .or_default()
                .entry(r.rank.clone())
                .or_default();
            let pos = match incarnations.iter().position(|i| i.instance == r.instance) {
                Some(pos) => pos,
                None => {
                    let begin = r
                        .time_unix_nanos
                        .saturating_sub((tracked * 1e9).round() as u64);
                    incarnations.push(Incarnation {
                        instance: r.instance.clone(),
                        incarnation: r.incarnation,
                        begin_unix_nanos: begin,
                        end_unix_nanos: r.time_unix_nanos,
                        seconds: Vec::new(),
                        step: None,
                        checkpoints: Vec::new(),
                        restored_step: None,
                        live: r.live,
                    });
                    incarnations.len() - 1
                }
            };
            let rec = &mut incarnations[pos];
            // Where its tracked time ends: its begin plus its seconds. The last point's
            // own time, but for one that `finalize()` stopped before its final export:
            // then the seconds end at the stop, and the recovery starts there.
            let end = rec
                .begin_unix_nanos
                .saturating_add((tracked * 1e9).round() as u64);
            if end >= rec.end_unix_nanos {
                rec.end_unix_nanos = end;
                rec.seconds.clone_from(&r.seconds);
            }
            rec.live = r.live;
            rec.step = r.step.or(rec.step);
            rec.restored_step = r.restored_step.or(rec.restored_step);
            // Every checkpoint the reading carries, kept in step order, once each.
            for (step, productive) in &r.checkpoints {
                let Some(step) = step.or(r.checkpoint_step) else {
                    continue;
                };
                match rec.checkpoints.iter_mut().find(|(s, _)| *s == step) {
                    Some(entry) => entry.1 = *productive,
                    None => {
                        rec.checkpoints.push((step, *productive));
                        rec.checkpoints.sort_by(|a, b| a.0.total_cmp(&b.0));
                    }
                }
            }
        }
    }

    /// Every job's figures.
    pub(crate) fn view(&self) -> Vec<JobSummary> {
        self.jobs
            .iter()
            .map(|(job_id, ranks)| summarize(job_id, ranks))
            .collect()
    }

    /// The ledger as JSON (what a checkpoint keeps).
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A ledger from [`to_json`](JobLedger::to_json)'s text; empty text is an empty
    /// ledger.
    pub(crate) fn from_json(text: &str) -> Result<JobLedger, serde_json::Error> {
        if text.is_empty() {
            return Ok(JobLedger::default());
        }
        serde_json::from_str(text)
    }
}

fn summarize(job_id: &str, ranks: &BTreeMap<String, Vec<Incarnation>>) -> JobSummary {
    let causes = BADPUT_CAUSES.len();
    let wasted_ix = BADPUT_CAUSES
        .iter()
        .position(|c| *c == "wasted_progress")
        .unwrap_or(0);
    let recovery_ix = BADPUT_CAUSES
        .iter()
        .position(|c| *c == "recovery")
        .unwrap_or(0);
    let mut job_bad = vec![0.0; causes];
    let (mut job_time, mut job_good, mut disruptions) = (0.0, 0.0, 0u64);
    let mut rank_rows = Vec::new();
    for (rank, incarnations) in ranks {
        let mut ordered: Vec<&Incarnation> = incarnations.iter().collect();
        ordered.sort_by_key(|i| (i.incarnation.unwrap_or(u64::MAX), i.begin_unix_nanos));
        disruptions = disruptions.max(ordered.len().saturating_sub(1) as u64);
        let mut bad = vec![0.0; causes];
        let (mut time, mut good) = (0.0, 0.0);
        let mut rows = Vec::new();
        for (k, inc) in ordered.iter().enumerate() {
            let next = ordered.get(k + 1);
            for (st, op, s) in &inc.seconds {
                match cause_of(st, op) {
                    Cause::Productive => good += s,
                    Cause::Badput(i) => bad[i] += s,
                }
            }
            let tracked = inc.tracked();
            time += tracked;
            // Progress a later incarnation redid: only for an incarnation that made
            // steps and was followed by another.
            let wasted = match next {
                Some(next) if inc.step.is_some() || !inc.checkpoints.is_empty() => {
                    let kept = next.restored_step.map_or(0.0, |restored| {
                        inc.checkpoints
                            .iter()
                            .filter(|(step, _)| *step <= restored)
                            .map(|(_, productive)| *productive)
                            .fold(0.0, f64::max)
                    });
                    (inc.gpu() - kept).max(0.0)
                }
                _ => 0.0,
            };
            good -= wasted;
            bad[wasted_ix] += wasted;
            let recovery = next.map_or(0.0, |next| {
                next.begin_unix_nanos.saturating_sub(inc.end_unix_nanos) as f64 / 1e9
            });
            time += recovery;
            bad[recovery_ix] += recovery;
            rows.push(IncarnationSummary {
                incarnation: inc.incarnation.unwrap_or(k as u64),
                begin_unix_s: inc.begin_unix_nanos as f64 / 1e9,
                end_unix_s: inc.end_unix_nanos as f64 / 1e9,
                live: inc.live,
                tracked_seconds: tracked,
                wasted_seconds: wasted,
                recovery_seconds: recovery,
                step: inc.step,
                restored_step: inc.restored_step,
            });
        }
        job_time += time;
        job_good += good;
        for (j, b) in job_bad.iter_mut().zip(&bad) {
            *j += b;
        }
        rank_rows.push(RankSummary {
            rank: rank.clone(),
            time_seconds: time,
            goodput_seconds: good,
            badput_seconds: named(&bad),
            incarnations: rows,
        });
    }
    rank_rows.sort_by(|a, b| rank_order(&a.rank, &b.rank));
    JobSummary {
        job_id: job_id.to_owned(),
        time_seconds: job_time,
        goodput_seconds: job_good,
        goodput_ratio: if job_time > 0.0 {
            job_good / job_time
        } else {
            0.0
        },
        badput_seconds: named(&job_bad),
        disruptions,
        ranks: rank_rows,
    }
}

fn named(values: &[f64]) -> Vec<(String, f64)> {
    BADPUT_CAUSES
        .iter()
        .zip(values)
        .map(|(c, v)| ((*c).to_owned(), *v))
        .collect()
}

/// `/api/jobs`: every job's figures, ranks and incarnations.
pub(crate) fn jobs_json(jobs: &[JobSummary]) -> serde_json::Value {
    let jobs: Vec<serde_json::Value> = jobs
        .iter()
        .map(|j| {
            let mut v = serde_json::to_value(j).unwrap_or_default();
            // Causes as an object, in order, for readers.
            let badput: serde_json::Map<String, serde_json::Value> = j
                .badput_seconds
                .iter()
                .map(|(c, s)| (c.clone(), serde_json::Value::from(*s)))
                .collect();
            v["badput_seconds"] = serde_json::Value::Object(badput);
            v
        })
        .collect();
    serde_json::json!({ "jobs": jobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(
        rank: &str,
        instance: &str,
        end_s: f64,
        secs: &[(&str, &str, f64)],
    ) -> JobSourceReading {
        JobSourceReading {
            job_id: "j".into(),
            rank: rank.into(),
            incarnation: None,
            instance: instance.into(),
            seconds: secs
                .iter()
                .map(|(s, o, v)| ((*s).to_owned(), (*o).to_owned(), *v))
                .collect(),
            time_unix_nanos: (end_s * 1e9) as u64,
            step: None,
            checkpoint_step: None,
            checkpoints: Vec::new(),
            restored_step: None,
            live: true,
        }
    }

    /// A crash after a checkpoint, a restart that restores it: the steps after the
    /// checkpoint are wasted, the gap is recovery, and the parts sum to the time.
    #[test]
    fn a_restart_from_a_checkpoint_splits_time_exactly() {
        let mut ledger = JobLedger::default();
        // Incarnation 0: 1000 s to 1100 s; 10 startup, 80 gpu, 10 checkpoint save; saved
        // step 50 at 40 gpu seconds; reached step 90.
        let mut first = reading(
            "0",
            "a",
            1100.0,
            &[
                ("startup", "", 10.0),
                ("gpu", "step", 80.0),
                ("io", CHECKPOINT_SAVE_OPERATION, 10.0),
            ],
        );
        first.step = Some(90.0);
        first.checkpoint_step = Some(50.0);
        first.checkpoints = vec![(None, 40.0)];
        ledger.update(&[first]);
        // Incarnation 1: begins at 1130 s (30 s of recovery), restores step 50.
        let mut second = reading(
            "0",
            "b",
            1150.0,
            &[
                ("io", CHECKPOINT_RESTORE_OPERATION, 5.0),
                ("gpu", "step", 15.0),
            ],
        );
        second.restored_step = Some(50.0);
        second.step = Some(60.0);
        ledger.update(&[second]);
        let view = ledger.view();
        let job = &view[0];
        let bad: BTreeMap<_, _> = job.badput_seconds.iter().cloned().collect();
        assert_eq!(job.time_seconds, 100.0 + 30.0 + 20.0);
        assert_eq!(bad["wasted_progress"], 40.0);
        assert_eq!(bad["recovery"], 30.0);
        assert_eq!(bad["startup"], 10.0);
        assert_eq!(bad["checkpoint_save"], 10.0);
        assert_eq!(bad["checkpoint_restore"], 5.0);
        assert_eq!(job.goodput_seconds, 40.0 + 15.0);
        let parts: f64 = job.goodput_seconds + bad.values().sum::<f64>();
        assert!(
            (parts - job.time_seconds).abs() < 1e-9,
            "{parts} vs {}",
            job.time_seconds
        );
        assert_eq!(job.disruptions, 1);
        // The ledger survives a round trip through its checkpoint text.
        let back = JobLedger::from_json(&ledger.to_json()).unwrap();
        assert_eq!(
            back.view(),
            ledger
                .view()
                .into_iter()
                .map(|mut j| {
                    for r in &mut j.ranks {
                        for i in &mut r.incarnations {
                            i.live = false;
                        }
                    }
                    j
                })
                .collect::<Vec<_>>()
        );
    }

    /// Without a restore, a restart redoes everything; without steps nothing is
    /// "wasted" (a serving worker's restart loses no progress).
    #[test]
    fn no_restore_wastes_all_and_no_steps_wastes_nothing() {
        let mut ledger = JobLedger::default();
        let mut a = reading("0", "a", 100.0, &[("gpu", "", 50.0)]);
        a.step = Some(10.0);
        let b = reading("0", "b", 200.0, &[("gpu", "", 20.0)]);
        let c = reading("1", "c", 100.0, &[("gpu", "", 50.0)]);
        let d = reading("1", "d", 200.0, &[("gpu", "", 20.0)]);
        ledger.update(&[a, b, c, d]);
        let job = &ledger.view()[0];
        assert_eq!(job.ranks[0].goodput_seconds, 20.0);
        assert_eq!(job.ranks[1].goodput_seconds, 70.0);
        assert_eq!(job.ranks[0].time_seconds, 50.0 + 80.0 + 20.0);
    }
}

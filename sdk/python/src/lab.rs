//! The lab agent's aggregator for the Python layer (`higgsmeter.lab`): one sample applied
//! to the seed's `SessionCounters` dataclass by the Rust session counters
//! (`higgsmeter_session::SessionCounters::apply`), written back with the seed's Python
//! types.
//!
//! `session_apply` reads the dataclasses' fields, runs the Rust `apply` on them and sets
//! the fields the seed's `apply_sample` assigns, in its order, with the values the seed
//! would hold: an `int` sum where the seed adds two `int`s, the sample's own object
//! where the seed assigns it (peaks, maxima, the loss). It applies nothing and returns
//! `False` when a value is one the Rust counters cannot hold exactly (anything but a
//! plain `int` or `float` in range, a bucket that is neither `str` nor `None`): the
//! Python layer then runs the seed's own code, so every input gets the seed's result
//! (or its exception). Whole seconds since the session start (`elapsed`) and the
//! processes seen come from the Python layer, which evaluates them as the seed does
//! (`datetime` subtraction, `in`).

use chrono::{DateTime, Utc};
use higgsmeter_session::{Sample, SessionCounters, SessionExport};
use opentelemetry::metrics::MeterProvider as _;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyString, PyTuple};

/// The largest integer magnitude taken as exact: an `f64` holds it, and the sum of two
/// of them, exactly.
const EXACT_INT: u64 = 1 << 52;

/// A plain number as the Rust counters hold it: its `f64` value and whether it is an
/// `int` (which the seed keeps as an `int` when added to an `int`).
#[derive(Clone, Copy)]
struct Num {
    value: f64,
    int: bool,
}

/// A plain `float`, or a plain `int` of at most 2**52 in magnitude; `None` otherwise.
fn num(v: &Bound<'_, PyAny>) -> Option<Num> {
    if v.is_exact_instance_of::<PyFloat>() {
        let value = v.extract::<f64>().ok()?;
        Some(Num { value, int: false })
    } else if v.is_exact_instance_of::<PyInt>() {
        let i = v.extract::<i64>().ok()?;
        (i.unsigned_abs() <= EXACT_INT).then_some(Num {
            value: i as f64,
            int: true,
        })
    } else {
        None
    }
}

/// A plain `int` that fits an `i64`.
fn int(v: &Bound<'_, PyAny>) -> Option<i64> {
    if v.is_exact_instance_of::<PyInt>() {
        v.extract::<i64>().ok()
    } else {
        None
    }
}

/// `None`, or what `read` makes of the value; `Err(())` when it makes nothing.
fn optional<T>(
    v: &Bound<'_, PyAny>,
    read: impl Fn(&Bound<'_, PyAny>) -> Option<T>,
) -> Result<Option<T>, ()> {
    if v.is_none() {
        Ok(None)
    } else {
        read(v).map(Some).ok_or(())
    }
}

/// The seed's value of `old + added`: an `int` when both are, else the `f64` sum.
fn sum_object<'py>(py: Python<'py>, new: f64, old: Num, added: Num) -> PyResult<Bound<'py, PyAny>> {
    if old.int && added.int {
        // Both are at most 2**52 in magnitude: the f64 sum is exact.
        #[allow(
            clippy::cast_possible_truncation,
            reason = "an exact integer below 2**53"
        )]
        let exact = new as i64;
        Ok(exact.into_pyobject(py)?.into_any())
    } else {
        Ok(PyFloat::new(py, new).into_any())
    }
}

/// What `session_apply` read: the Rust counters and sample, and the Python values the
/// write-back needs.
struct Read<'py> {
    counters: SessionCounters,
    sample: Sample,
    window_old: [Num; 4],
    gpu_active_old: Num,
    interval: Num,
    util: Bound<'py, PyAny>,
    vram: Bound<'py, PyAny>,
    frames: Bound<'py, PyAny>,
    epochs: Bound<'py, PyAny>,
    loss: Bound<'py, PyAny>,
}

const WINDOW_FIELDS: [&str; 4] = [
    higgsmeter_session::SUBJECT_FIELD,
    "seconds_in_terminal",
    "seconds_in_browser",
    "seconds_in_other",
];

fn read<'py>(
    c: &Bound<'py, PyAny>,
    s: &Bound<'py, PyAny>,
    elapsed: i64,
    seen: Vec<String>,
) -> PyResult<Option<Read<'py>>> {
    macro_rules! get {
        ($obj:expr, $name:literal, $how:expr) => {
            match $how(&$obj.getattr($name)?) {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    macro_rules! get_opt {
        ($obj:expr, $name:literal, $how:expr) => {
            match optional(&$obj.getattr($name)?, $how) {
                Ok(v) => v,
                Err(()) => return Ok(None),
            }
        };
    }
    let (Some(epoch), Some(ts)) = (
        DateTime::<Utc>::from_timestamp(0, 0),
        DateTime::<Utc>::from_timestamp(elapsed, 0),
    ) else {
        return Ok(None);
    };
    let sample_count = get!(c, "sample_count", |v| int(v)
        .and_then(|i| u64::try_from(i).ok()));
    let mut window_old = [Num {
        value: 0.0,
        int: true,
    }; 4];
    for (old, field) in window_old.iter_mut().zip(WINDOW_FIELDS) {
        match num(&c.getattr(field)?) {
            Some(v) => *old = v,
            None => return Ok(None),
        }
    }
    let gpu_active_old = get!(c, "gpu_active_seconds", num);
    let counters = SessionCounters {
        session_started_at: epoch.fixed_offset(),
        sample_count,
        seconds_in_subject_software: window_old[0].value,
        seconds_in_terminal: window_old[1].value,
        seconds_in_browser: window_old[2].value,
        seconds_in_other: window_old[3].value,
        gpu_active_seconds: gpu_active_old.value,
        gpu_util_peak: get!(c, "gpu_util_peak", num).value,
        vram_used_peak_mb: get!(c, "vram_used_peak_mb", num).value,
        seconds_to_first_sleap_label: get_opt!(c, "seconds_to_first_sleap_label", int),
        seconds_to_first_sleap_train: get_opt!(c, "seconds_to_first_sleap_train", int),
        seconds_to_first_sleap_track: get_opt!(c, "seconds_to_first_sleap_track", int),
        max_labeled_frames: get!(c, "max_labeled_frames", int),
        training_epochs_completed: get!(c, "training_epochs_completed", int),
        // The seed only ever assigns it: its old value plays no part.
        training_final_loss: None,
    };
    let interval = get!(s, "sample_interval_seconds", num);
    let bucket = s.getattr("active_window_bucket")?;
    let active_window_bucket = if bucket.is_none() {
        None
    } else if bucket.is_exact_instance_of::<PyString>() {
        Some(bucket.extract::<String>()?)
    } else {
        return Ok(None);
    };
    let (util, vram) = (s.getattr("gpu_util_pct")?, s.getattr("vram_mb")?);
    let (frames, epochs, loss) = (
        s.getattr("max_labeled_frames")?,
        s.getattr("training_epochs_completed")?,
        s.getattr("training_final_loss")?,
    );
    let (Some(util_num), Some(vram_num)) = (num(&util), num(&vram)) else {
        return Ok(None);
    };
    let (Ok(frames_v), Ok(epochs_v), Ok(loss_v)) = (
        optional(&frames, int),
        optional(&epochs, int),
        optional(&loss, num),
    ) else {
        return Ok(None);
    };
    let sample = Sample {
        ts: ts.fixed_offset(),
        sample_interval_seconds: interval.value,
        active_window_bucket,
        gpu_util_pct: util_num.value,
        vram_mb: vram_num.value,
        processes_seen: seen,
        max_labeled_frames: frames_v,
        training_epochs_completed: epochs_v,
        training_final_loss: loss_v.map(|n| n.value),
    };
    Ok(Some(Read {
        counters,
        sample,
        window_old,
        gpu_active_old,
        interval,
        util,
        vram,
        frames,
        epochs,
        loss,
    }))
}

/// Applies one sample to the seed's `SessionCounters` dataclass `c` with the Rust
/// counters, as the seed's `apply_sample(c, s)` would; `elapsed` is the seed's
/// `int((s.ts - c.session_started_at).total_seconds())` and `seen` the names of
/// `SESSION_SLEAP_PROCESSES` that are `in s.processes_seen`, in that order.
///
/// Returns `False`, having changed nothing, when a value is not one the Rust counters
/// hold exactly; the caller then runs the seed's Python code.
#[pyfunction]
pub(crate) fn session_apply(
    c: &Bound<'_, PyAny>,
    s: &Bound<'_, PyAny>,
    elapsed: i64,
    seen: Vec<String>,
) -> PyResult<bool> {
    let py = c.py();
    let Some(r) = read(c, s, elapsed, seen)? else {
        return Ok(false);
    };
    let before = r.counters.clone();
    let mut after = r.counters;
    after.apply(&r.sample);

    // The seed's assignments, in its order.
    c.setattr("sample_count", after.sample_count)?;
    let bucket = r.sample.window_bucket();
    let field = SessionCounters::window_field(bucket);
    let slot = WINDOW_FIELDS.iter().position(|f| *f == field).unwrap_or(3);
    let new = after.window_seconds()[slot].1;
    c.setattr(field, sum_object(py, new, r.window_old[slot], r.interval)?)?;
    if r.sample.gpu_active() {
        let new = after.gpu_active_seconds;
        c.setattr(
            "gpu_active_seconds",
            sum_object(py, new, r.gpu_active_old, r.interval)?,
        )?;
    }
    // A peak the Rust counters raised is the sample's value: the seed assigns the
    // sample's own object.
    if after.gpu_util_peak.to_bits() != before.gpu_util_peak.to_bits() {
        c.setattr("gpu_util_peak", &r.util)?;
    }
    if after.vram_used_peak_mb.to_bits() != before.vram_used_peak_mb.to_bits() {
        c.setattr("vram_used_peak_mb", &r.vram)?;
    }
    let firsts = after.first_seen().into_iter().zip(before.first_seen());
    for ((name, now), (_, was)) in firsts {
        if let (Some(seconds), None) = (now, was) {
            let field = match name {
                "sleap-label" => "seconds_to_first_sleap_label",
                "sleap-train" => "seconds_to_first_sleap_train",
                _ => "seconds_to_first_sleap_track",
            };
            c.setattr(field, seconds)?;
        }
    }
    if after.max_labeled_frames != before.max_labeled_frames {
        c.setattr("max_labeled_frames", &r.frames)?;
    }
    if after.training_epochs_completed != before.training_epochs_completed {
        c.setattr("training_epochs_completed", &r.epochs)?;
    }
    if after.training_final_loss.is_some() {
        c.setattr("training_final_loss", &r.loss)?;
    }
    Ok(true)
}

/// Adds the aggregator's constants (`SESSION_GPU_ACTIVE_UTIL_THRESHOLD`,
/// `SESSION_SUBJECT_FIELD`, `SESSION_WINDOW_BUCKETS`, `SESSION_SLEAP_PROCESSES`) and
/// `session_apply` to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add(
        "SESSION_GPU_ACTIVE_UTIL_THRESHOLD",
        higgsmeter_session::GPU_ACTIVE_UTIL_THRESHOLD,
    )?;
    m.add("SESSION_SUBJECT_FIELD", higgsmeter_session::SUBJECT_FIELD)?;
    m.add(
        "SESSION_WINDOW_BUCKETS",
        PyTuple::new(py, higgsmeter_session::WINDOW_BUCKETS)?,
    )?;
    m.add(
        "SESSION_SLEAP_PROCESSES",
        PyTuple::new(py, higgsmeter_session::SLEAP_PROCESSES)?,
    )?;
    m.add_function(wrap_pyfunction!(session_apply, m)?)?;
    m.add_class::<PySessionExport>()?;
    Ok(())
}

/// The session families of one `SessionCounters` dataclass, exported through the
/// process's OpenTelemetry pipeline (`higgsmeter.lab.export`): each `publish` copies
/// the dataclass's fields into the Rust counters the instruments read at each export.
#[pyclass(module = "higgsmeter._core", name = "SessionExport", frozen)]
pub(crate) struct PySessionExport {
    inner: SessionExport,
}

#[pymethods]
impl PySessionExport {
    /// Registers the session families on the running pipeline's meter, reporting `c`'s
    /// fields as they are now. Raises `RuntimeError` when no pipeline exports metrics.
    #[new]
    fn new(c: &Bound<'_, PyAny>) -> PyResult<Self> {
        let provider = crate::pipeline::meter_provider().ok_or_else(|| {
            PyRuntimeError::new_err(
                "no metrics pipeline runs in this process: set OTEL_EXPORTER_OTLP_ENDPOINT \
                 (or HIGGSMETER_PROMETHEUS_ADDR) before exporting the session counters",
            )
        })?;
        let counters = published(c, None)?;
        Ok(PySessionExport {
            inner: SessionExport::register(&provider.meter("higgsmeter-session"), counters),
        })
    }

    /// Makes `c`'s fields what the next export reports. A field whose value is not a
    /// number (or `None` where the field may be unset) keeps the value published last.
    fn publish(&self, c: &Bound<'_, PyAny>) -> PyResult<()> {
        let counters = published(c, Some(self.inner.counters()))?;
        self.inner.publish(counters);
        Ok(())
    }
}

/// The Rust counters of a `SessionCounters` dataclass: every field read as a number
/// (`float(x)`, an `int` kept whole), `session_started_at` through its `isoformat()`;
/// a field that does not read keeps its value in `last` (zero or unset without one).
fn published(c: &Bound<'_, PyAny>, last: Option<SessionCounters>) -> PyResult<SessionCounters> {
    let started = c
        .getattr("session_started_at")
        .and_then(|t| t.call_method0("isoformat"))
        .ok()
        .and_then(|t| t.extract::<String>().ok())
        .and_then(|t| higgsmeter_session::parse_timestamp(&t));
    let mut out = last.unwrap_or_else(|| {
        SessionCounters::new(started.unwrap_or_else(|| DateTime::<Utc>::UNIX_EPOCH.fixed_offset()))
    });
    if let Some(started) = started {
        out.session_started_at = started;
    }
    let float = |name: &str| -> Option<f64> { c.getattr(name).ok()?.extract::<f64>().ok() };
    let whole = |v: &Bound<'_, PyAny>| -> Option<i64> {
        v.extract::<i64>().ok().or_else(|| {
            let f = v.extract::<f64>().ok()?;
            // Truncated toward zero, saturating, as `int(x)` for the values that fit.
            #[allow(clippy::cast_possible_truncation, reason = "saturating by design")]
            f.is_finite().then_some(f.trunc() as i64)
        })
    };
    let int = |name: &str| -> Option<i64> { whole(&c.getattr(name).ok()?) };
    // `None` unsets; a number sets; anything else keeps the last value.
    let optional = |name: &str, slot: &mut Option<i64>| {
        if let Ok(v) = c.getattr(name) {
            if v.is_none() {
                *slot = None;
            } else if let Some(i) = whole(&v) {
                *slot = Some(i);
            }
        }
    };
    if let Some(n) = int("sample_count") {
        out.sample_count = u64::try_from(n).unwrap_or(0);
    }
    for (field, slot) in [
        (
            higgsmeter_session::SUBJECT_FIELD,
            &mut out.seconds_in_subject_software,
        ),
        ("seconds_in_terminal", &mut out.seconds_in_terminal),
        ("seconds_in_browser", &mut out.seconds_in_browser),
        ("seconds_in_other", &mut out.seconds_in_other),
        ("gpu_active_seconds", &mut out.gpu_active_seconds),
        ("gpu_util_peak", &mut out.gpu_util_peak),
        ("vram_used_peak_mb", &mut out.vram_used_peak_mb),
    ] {
        if let Some(v) = float(field) {
            *slot = v;
        }
    }
    optional(
        "seconds_to_first_sleap_label",
        &mut out.seconds_to_first_sleap_label,
    );
    optional(
        "seconds_to_first_sleap_train",
        &mut out.seconds_to_first_sleap_train,
    );
    optional(
        "seconds_to_first_sleap_track",
        &mut out.seconds_to_first_sleap_track,
    );
    if let Some(n) = int("max_labeled_frames") {
        out.max_labeled_frames = n;
    }
    if let Some(n) = int("training_epochs_completed") {
        out.training_epochs_completed = n;
    }
    if let Ok(v) = c.getattr("training_final_loss") {
        if v.is_none() {
            out.training_final_loss = None;
        } else if let Ok(f) = v.extract::<f64>() {
            out.training_final_loss = Some(f);
        }
    }
    Ok(out)
}

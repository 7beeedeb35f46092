//! The store's label policy: the text form of attribute values, a source's identity
//! labels and `target_info`, and a series' per-source and fleet labels.

use std::borrow::Cow;

use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};

use super::super::naming::{normalize_labels, render_labels, sanitize_label_name};
use super::super::wire::Val;

/// The text form of an attribute value (strings as they are, arrays and maps as JSON).
pub(crate) fn value_string(v: Option<&AnyValue>) -> Cow<'_, str> {
    match v.and_then(|v| v.value.as_ref()) {
        None => Cow::Borrowed(""),
        Some(any_value::Value::StringValue(s)) => Cow::Borrowed(s),
        Some(any_value::Value::BoolValue(b)) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Some(any_value::Value::IntValue(i)) => Cow::Owned(i.to_string()),
        Some(any_value::Value::DoubleValue(d)) => Cow::Owned(d.to_string()),
        Some(any_value::Value::BytesValue(b)) => {
            Cow::Owned(b.iter().map(|x| format!("{x:02x}")).collect())
        }
        Some(other) => Cow::Owned(json_value(other).to_string()),
    }
}

fn json_value(v: &any_value::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        any_value::Value::StringValue(s) => J::String(s.clone()),
        any_value::Value::BoolValue(b) => J::Bool(*b),
        any_value::Value::IntValue(i) => J::from(*i),
        any_value::Value::DoubleValue(d) => {
            serde_json::Number::from_f64(*d).map_or(J::Null, J::Number)
        }
        any_value::Value::BytesValue(b) => {
            J::String(b.iter().map(|x| format!("{x:02x}")).collect())
        }
        any_value::Value::ArrayValue(a) => J::Array(
            a.values
                .iter()
                .map(|x| x.value.as_ref().map_or(J::Null, json_value))
                .collect(),
        ),
        any_value::Value::KvlistValue(kv) => J::Object(
            kv.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        kv.value
                            .as_ref()
                            .and_then(|x| x.value.as_ref())
                            .map_or(J::Null, json_value),
                    )
                })
                .collect(),
        ),
        #[allow(unreachable_patterns)]
        _ => J::Null,
    }
}

/// The text form of a borrowed attribute value.
pub(crate) fn val_string<'a>(v: &Val<'a>) -> Cow<'a, str> {
    match *v {
        Val::Empty => Cow::Borrowed(""),
        Val::Str(s) => Cow::Borrowed(s),
        Val::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
        Val::Int(i) => Cow::Owned(i.to_string()),
        Val::Double(d) => Cow::Owned(d.to_string()),
        Val::Bytes(b) => Cow::Owned(b.iter().map(|x| format!("{x:02x}")).collect()),
        Val::Complex(_) => Cow::Owned(value_string(Some(&v.to_proto())).into_owned()),
    }
}

/// A source's labels: its identity labels (`job`, `instance`, the `sum_over`
/// attributes it has) on every per-source series, its `target_info` labels, and the
/// `job` its fleet series keep (none when `service.name` is summed over).
pub(super) struct SourceLabels {
    pub(super) labels: Vec<(String, String)>,
    pub(super) target_info: String,
    pub(super) fleet_job: Option<String>,
    pub(super) aggregate: bool,
}

/// The labels of the source whose canonical resource is `key`. A lower collector's
/// fleet export (an aggregate source) is labelled `higgsmeter_collector="<its
/// instance id>"` and gives the fleet no `job`: its points carry their own.
pub(super) fn source_labels(
    key: &[(String, String)],
    sum_over: &[String],
    static_labels: &[(String, String)],
) -> SourceLabels {
    let get = |name: &str| key.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    if get(super::ROLE) == Some(super::ROLE_AGGREGATE) {
        let instance = get("service.instance.id").unwrap_or("").to_owned();
        let labels = vec![("higgsmeter_collector".to_owned(), instance)];
        let mut info = labels.clone();
        info.push((
            "job".to_owned(),
            get("service.name").unwrap_or("").to_owned(),
        ));
        info.extend(static_labels.iter().cloned());
        return SourceLabels {
            labels,
            target_info: render_labels(&normalize_labels(info)),
            fleet_job: None,
            aggregate: true,
        };
    }
    let service = get("service.name").unwrap_or("unknown_service");
    let job = match get("service.namespace") {
        Some(ns) if !ns.is_empty() => format!("{ns}/{service}"),
        _ => service.to_owned(),
    };
    let instance = get("service.instance.id").unwrap_or("").to_owned();
    let mut labels = vec![("job".to_owned(), job.clone())];
    if !instance.is_empty() {
        labels.push(("instance".to_owned(), instance.clone()));
    }
    for name in sum_over {
        if matches!(
            name.as_str(),
            "service.instance.id" | "service.name" | "service.namespace"
        ) {
            continue;
        }
        if let Some(v) = get(name) {
            labels.push((sanitize_label_name(name), v.to_owned()));
        }
    }
    let labels = normalize_labels(labels);
    let mut info = vec![("job".to_owned(), job.clone())];
    if !instance.is_empty() {
        info.push(("instance".to_owned(), instance));
    }
    for (k, v) in key {
        if !matches!(
            k.as_str(),
            "service.name" | "service.namespace" | "service.instance.id"
        ) {
            info.push((sanitize_label_name(k), v.clone()));
        }
    }
    info.extend(static_labels.iter().cloned());
    let target_info = render_labels(&normalize_labels(info));
    let fleet_job = (!sum_over.iter().any(|k| k == "service.name")).then_some(job);
    SourceLabels {
        labels,
        target_info,
        fleet_job,
        aggregate: false,
    }
}

/// A series' labels: the rendered per-source labels, and its fleet entry's label pairs.
pub(super) struct SeriesLabels {
    pub(super) labels: String,
    pub(super) fleet_pairs: Vec<(String, String)>,
}

/// The labels of a series with point attributes `attrs_key` (canonical) of a source
/// with `source_labels` and `fleet_job`: point labels sanitised, a name that clashes
/// with ours (`job`, `instance`, `le`, an identity or static label) becomes
/// `exported_<name>` (except an aggregate source's own `job` and `instance`); the fleet
/// drops the `sum_over` attributes and keeps `job`.
pub(super) fn series_labels(
    source_labels: &[(String, String)],
    aggregate: bool,
    fleet_job: Option<&str>,
    attrs_key: &[(String, String)],
    sum_over: &[String],
    static_labels: &[(String, String)],
) -> SeriesLabels {
    // Point labels, sanitised; names that clash with ours become exported_<name>.
    let mut point_labels: Vec<(String, String)> = Vec::with_capacity(attrs_key.len());
    let mut fleet_labels: Vec<(String, String)> = Vec::with_capacity(attrs_key.len() + 2);
    for (k, v) in attrs_key {
        let mut name = sanitize_label_name(k);
        let ours = if aggregate {
            name == "le"
        } else {
            matches!(name.as_str(), "job" | "instance" | "le")
        };
        if ours
            || source_labels.iter().any(|(l, _)| *l == name)
            || static_labels.iter().any(|(l, _)| *l == name)
        {
            name = format!("exported_{name}");
        }
        point_labels.push((name.clone(), v.clone()));
        if !sum_over.iter().any(|s| s == k) {
            fleet_labels.push((name, v.clone()));
        }
    }
    let mut labels = source_labels.to_vec();
    labels.extend(point_labels);
    labels.extend(static_labels.iter().cloned());
    let labels = render_labels(&normalize_labels(labels));
    if let Some(job) = fleet_job {
        fleet_labels.push(("job".to_owned(), job.to_owned()));
    }
    fleet_labels.extend(static_labels.iter().cloned());
    let fleet_pairs = normalize_labels(fleet_labels);
    SeriesLabels {
        labels,
        fleet_pairs,
    }
}

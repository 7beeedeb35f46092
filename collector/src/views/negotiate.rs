//! Content negotiation of the Prometheus endpoints, as the ecosystem's exporters do it
//! (client_golang's `expfmt.NegotiateIncludingOpenMetrics` and `promhttp`'s gzip).
//!
//! The format: the `Accept` header's media ranges, by `q` (highest first; at equal `q`
//! a specific type before a wildcard, then in the header's order; `q=0` is refused),
//! the first one the collector speaks wins: the protobuf exposition
//! (`application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
//! encoding=delimited`), OpenMetrics (`application/openmetrics-text`, version 1.0.0,
//! 0.0.1 or none), or text (`text/plain`, version 0.0.4 or none). Nothing matched
//! (no header, `*/*` alone): text.
//!
//! The content coding: gzip when `Accept-Encoding` lists it (`gzip`, `x-gzip`, or `*`)
//! with a `q` above 0, unless it names `identity` with a higher `q`; else none (as
//! client_golang's `promhttp` picks between gzip and identity).

use super::exposition::Format;

/// What a scrape is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exposition {
    /// Prometheus text 0.0.4 (or OpenMetrics 1.0): `views::exposition`.
    Text(Format),
    /// Length-delimited `io.prometheus.client.MetricFamily` messages:
    /// `views::exposition_proto`.
    Protobuf,
}

/// The text exposition format's content type.
pub(crate) const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics' content type.
pub(crate) const OPENMETRICS_FORMAT: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The protobuf exposition's content type, as client_golang writes it.
pub(crate) const PROTOBUF_FORMAT: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

impl Exposition {
    /// The response's `Content-Type`.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Exposition::Text(Format::Text) => TEXT_FORMAT,
            Exposition::Text(Format::OpenMetrics) => OPENMETRICS_FORMAT,
            Exposition::Protobuf => PROTOBUF_FORMAT,
        }
    }

    /// A short name, for logs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Exposition::Text(Format::Text) => "text",
            Exposition::Text(Format::OpenMetrics) => "openmetrics",
            Exposition::Protobuf => "protobuf",
        }
    }
}

/// A response body's content coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// As is.
    Identity,
    /// gzip (`Content-Encoding: gzip`).
    Gzip,
}

/// One element of an `Accept` or `Accept-Encoding` list: the value (lowercased, without
/// parameters), its parameters (names lowercased, values unquoted) and its `q`.
struct Element<'a> {
    value: String,
    params: Vec<(String, &'a str)>,
    q: f32,
}

impl Element<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

/// Splits a comma-separated header value into elements (empty ones skipped; an unparsable
/// `q` counts as 1, a `q` outside 0–1 is clamped).
fn elements(header: &str) -> Vec<Element<'_>> {
    header
        .split(',')
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let value = pieces.next()?.trim().to_ascii_lowercase();
            if value.is_empty() {
                return None;
            }
            let mut q = 1.0f32;
            let mut params = Vec::new();
            for param in pieces {
                let Some((k, v)) = param.split_once('=') else {
                    continue;
                };
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim().trim_matches('"');
                if k == "q" {
                    q = v.parse::<f32>().map_or(1.0, |q| q.clamp(0.0, 1.0));
                } else {
                    params.push((k, v));
                }
            }
            Some(Element { value, params, q })
        })
        .collect()
}

/// The format `accept` (an `Accept` header's value, empty when there is none) asks for.
pub(crate) fn format(accept: &str) -> Exposition {
    let mut ranges = elements(accept);
    ranges.retain(|r| r.q > 0.0);
    // Highest q first; at equal q, `type/sub` before `type/*` before `*/*`; then the
    // header's order (a stable sort).
    let wildcards = |r: &Element<'_>| r.value.split('/').filter(|part| *part == "*").count();
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| wildcards(a).cmp(&wildcards(b)))
    });
    for range in &ranges {
        let version = range.param("version");
        match range.value.as_str() {
            "application/vnd.google.protobuf"
                if range.param("proto") == Some("io.prometheus.client.MetricFamily")
                    && range
                        .param("encoding")
                        .is_some_and(|e| e.eq_ignore_ascii_case("delimited")) =>
            {
                return Exposition::Protobuf;
            }
            "text/plain" if matches!(version, None | Some("0.0.4")) => {
                return Exposition::Text(Format::Text);
            }
            "application/openmetrics-text"
                if matches!(version, None | Some("1.0.0") | Some("0.0.1")) =>
            {
                return Exposition::Text(Format::OpenMetrics);
            }
            _ => {}
        }
    }
    Exposition::Text(Format::Text)
}

/// The content coding `accept_encoding` (an `Accept-Encoding` header's value, empty when
/// there is none) asks for.
pub(crate) fn coding(accept_encoding: &str) -> Coding {
    let codings = elements(accept_encoding);
    let q_of = |names: &[&str]| {
        codings
            .iter()
            .filter(|c| names.contains(&c.value.as_str()))
            .map(|c| c.q)
            .reduce(f32::max)
    };
    let gzip = q_of(&["gzip", "x-gzip"])
        .or_else(|| q_of(&["*"]))
        .unwrap_or(0.0);
    // Listed at all, gzip is taken unless identity is asked for by name with a higher
    // q (client_golang's rule: an unlisted identity is no competitor).
    let identity = q_of(&["identity"]).unwrap_or(0.0);
    if gzip > 0.0 && gzip >= identity {
        Coding::Gzip
    } else {
        Coding::Identity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTOBUF: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";

    #[test]
    fn what_prometheus_sends_picks_what_client_golang_picks() {
        // Prometheus 2.42's Accept, without and with native histograms.
        let scrape = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format(scrape), Exposition::Text(Format::OpenMetrics));
        let native = format!(
            "{PROTOBUF},application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        );
        assert_eq!(format(&native), Exposition::Protobuf);
        // Prometheus 3's text-only and protobuf-first headers.
        assert_eq!(
            format("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            Exposition::Text(Format::Text)
        );
        assert_eq!(
            format(&format!("{PROTOBUF};q=0.9,text/plain;q=0.5")),
            Exposition::Protobuf
        );
    }

    #[test]
    fn q_values_pick_the_most_wanted_format() {
        for (accept, want) in [
            ("", Exposition::Text(Format::Text)),
            ("*/*", Exposition::Text(Format::Text)),
            ("application/json", Exposition::Text(Format::Text)),
            (
                "text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5",
                Exposition::Text(Format::Text),
            ),
            (
                "text/plain;q=0.3, application/openmetrics-text;version=1.0.0;q=0.7",
                Exposition::Text(Format::OpenMetrics),
            ),
            // Refused outright.
            (
                "application/openmetrics-text;q=0, text/plain;q=0.1",
                Exposition::Text(Format::Text),
            ),
            // A version the collector does not write is skipped.
            (
                "application/openmetrics-text;version=2.0.0, text/plain;q=0.2",
                Exposition::Text(Format::Text),
            ),
            ("text/plain;version=0.0.5", Exposition::Text(Format::Text)),
            // Protobuf only as delimited MetricFamily messages.
            (
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text,application/openmetrics-text;q=0.5",
                Exposition::Text(Format::OpenMetrics),
            ),
            (
                "application/vnd.google.protobuf;proto=other.Message;encoding=delimited",
                Exposition::Text(Format::Text),
            ),
            (
                "Application/OpenMetrics-Text; Version=\"1.0.0\"",
                Exposition::Text(Format::OpenMetrics),
            ),
            // Equal q: the header's order.
            (
                &format!("application/openmetrics-text;q=0.5,{PROTOBUF};q=0.5"),
                Exposition::Text(Format::OpenMetrics),
            ),
            (
                &format!("{PROTOBUF};q=0.5,application/openmetrics-text;q=0.5"),
                Exposition::Protobuf,
            ),
            // An unparsable q counts as 1.
            (
                "text/plain;q=0.4,application/openmetrics-text;q=high",
                Exposition::Text(Format::OpenMetrics),
            ),
        ] {
            assert_eq!(format(accept), want, "{accept}");
        }
    }

    #[test]
    fn gzip_only_when_the_client_accepts_it() {
        for (header, want) in [
            ("", Coding::Identity),
            ("identity", Coding::Identity),
            ("deflate, br", Coding::Identity),
            ("gzip", Coding::Gzip),
            ("gzip, deflate", Coding::Gzip),
            ("GZIP;q=0.5", Coding::Gzip),
            ("x-gzip", Coding::Gzip),
            ("*", Coding::Gzip),
            ("gzip;q=0", Coding::Identity),
            ("*;q=0.5, gzip;q=0", Coding::Identity),
            ("gzip;q=0.2, identity;q=0.8", Coding::Identity),
            ("gzip;q=0.8, identity;q=0.2", Coding::Gzip),
            ("identity;q=0, gzip;q=0.1", Coding::Gzip),
        ] {
            assert_eq!(coding(header), want, "{header:?}");
        }
    }
}

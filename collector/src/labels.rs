//! The label values of the collector's own metrics (`higgsmeter_collector_*`): one enum
//! per label, each knowing its members and their text, and [`By`], an array of
//! counters sized by such an enum and indexed by its members only. Beside them, the
//! other names every layer shares: a metric's [`MetricKind`] and the resource attributes
//! that mark a collector's own exports ([`ROLE`], [`FORWARDED_BY`]).
//!
//! A leaf module: it uses nothing else of the crate, so the receivers, the exporters,
//! the store and the self-metric table can all name these without an import cycle.
//! Adding a member to an enum here resizes every table that counts by it: no literal
//! array size to forget, no index that can fall outside its table.

use std::marker::PhantomData;
use std::ops::Index;

/// A label whose values are the members of an enum.
pub(crate) trait Label: Copy + 'static {
    /// How many members there are.
    const COUNT: usize;
    /// Every member, in index order.
    const ALL: &'static [Self];
    /// The member's position in [`Label::ALL`].
    fn index(self) -> usize;
    /// The label value.
    #[allow(
        dead_code,
        reason = "the members' own `as_str` serve the code; the tests read it generically"
    )]
    fn as_str(self) -> &'static str;
}

/// Declares a label enum: its members, their label values, and [`Label`].
macro_rules! label {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $member:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $member,)+
        }

        impl $name {
            /// How many members there are.
            #[allow(dead_code, reason = "not every label is counted by size")]
            $vis const COUNT: usize = [$($name::$member),+].len();
            /// Every member, in index order.
            $vis const ALL: [$name; $name::COUNT] = [$($name::$member),+];

            /// The label value.
            $vis fn as_str(self) -> &'static str {
                match self {
                    $($name::$member => $text,)+
                }
            }
        }

        impl $crate::labels::Label for $name {
            const COUNT: usize = $name::COUNT;
            const ALL: &'static [Self] = &$name::ALL;
            fn index(self) -> usize {
                self as usize
            }
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }
    };
}
pub(crate) use label;

label! {
    /// The transport a request came in on.
    pub enum Transport {
        /// OTLP/gRPC.
        Grpc = "grpc",
        /// OTLP/HTTP.
        Http = "http",
    }
}

label! {
    /// Why a whole request was refused.
    pub(crate) enum RequestRefusal {
        /// Not a decodable OTLP message.
        Malformed = "malformed",
        /// A content type other than protobuf or JSON.
        ContentType = "content_type",
        /// A body that does not decompress.
        Decompress = "decompress",
        /// Over the receiver's size limit.
        TooLarge = "too_large",
        /// Logs, or traces without a traces pipeline.
        UnsupportedSignal = "unsupported_signal",
        /// Without the bearer token.
        Unauthenticated = "unauthenticated",
        /// A traces exporter's queue had no room.
        QueueFull = "queue_full",
        /// Anything else.
        Other = "other",
    }
}

label! {
    /// Why a receiver closed a connection before its peer did.
    pub(crate) enum CloseReason {
        /// No finished opening (TLS handshake, HTTP/2 preface and SETTINGS, first
        /// request headers) within the receiver's limit.
        OpeningTimeout = "opening_timeout",
        /// No request in flight for longer than the receiver allows.
        IdleTimeout = "idle_timeout",
        /// Unfinished or idle, closed to make room for a new connection.
        Shed = "shed",
        /// Unfinished or idle when the collector stopped.
        Shutdown = "shutdown",
    }
}

label! {
    /// What became of forwarded spans.
    pub(crate) enum SpanOutcome {
        /// Taken by the upstream.
        Ok = "ok",
        /// Taken, but rejected by the upstream (a partial success).
        Rejected = "rejected",
        /// Never taken: refused, or still queued when shutdown ended.
        Dropped = "dropped",
    }
}

label! {
    /// Why an exporter dropped points (the `reason` label of
    /// `higgsmeter_collector_export_dropped_points_total`).
    pub(crate) enum DropReason {
        /// The bounded queue was full (the upstream down or slow): the oldest reading
        /// went.
        QueueFull = "queue_full",
        /// The upstream refused the request for good (a 4xx other than 408/429,
        /// `INVALID_ARGUMENT`, ...); never retried.
        Refused = "refused",
        /// The upstream took the request but rejected these points (OTLP partial
        /// success).
        Rejected = "rejected",
        /// The final flush on shutdown did not go through.
        Shutdown = "shutdown",
        /// The points could not be encoded (never expected).
        Encode = "encode",
    }
}

label! {
    /// A listener that can be TLS-only.
    pub(crate) enum Listener {
        /// An OTLP/gRPC receiver.
        Grpc = "grpc",
        /// An OTLP/HTTP receiver.
        Http = "http",
        /// A Prometheus endpoint.
        Prometheus = "prometheus",
    }
}

label! {
    /// Why a data point was refused (the `reason` label of
    /// `higgsmeter_collector_points_refused_total`).
    pub(crate) enum RefusalReason {
        /// NaN or infinite.
        NonFinite = "non_finite",
        /// A counter below zero.
        NegativeCounter = "negative_counter",
        /// Histogram bounds and counts that do not fit.
        HistogramBounds = "histogram_bounds",
        /// Anything else unusable in the point.
        Invalid = "invalid",
        /// A name held by a family of another type or unit.
        TypeConflict = "type_conflict",
        /// Exponential histograms and summaries.
        UnsupportedType = "unsupported_type",
        /// Past a cardinality limit.
        Cardinality = "cardinality",
        /// Older than what the series holds.
        OutOfOrder = "out_of_order",
    }
}

impl Listener {
    /// What the logs and `--check-config` call it.
    pub(crate) fn role(self) -> &'static str {
        match self {
            Listener::Grpc => "OTLP/gRPC receiver",
            Listener::Http => "OTLP/HTTP receiver",
            Listener::Prometheus => "Prometheus endpoint",
        }
    }
}

/// One `T` per member of the label `E` (`N` must be `E::COUNT`, checked when the table
/// is made), indexed by the members themselves.
#[derive(Debug)]
pub(crate) struct By<E, T, const N: usize> {
    items: [T; N],
    label: PhantomData<E>,
}

impl<E: Label, T: Default, const N: usize> Default for By<E, T, N> {
    fn default() -> Self {
        const {
            assert!(
                N == E::COUNT,
                "a table's size must be its label's member count"
            )
        };
        By {
            items: std::array::from_fn(|_| T::default()),
            label: PhantomData,
        }
    }
}

impl<E: Label, T, const N: usize> Index<E> for By<E, T, N> {
    type Output = T;

    fn index(&self, e: E) -> &T {
        // In bounds: `index` < `E::COUNT` == `N`, checked when the table was made.
        &self.items[e.index()]
    }
}

impl<E: Label, T, const N: usize> By<E, T, N> {
    /// Each member with its item, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (E, &T)> {
        E::ALL.iter().copied().zip(self.items.iter())
    }
}

/// What kind of series a metric has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricKind {
    /// A monotonic sum.
    Counter,
    /// A gauge or a non-monotonic sum.
    Gauge,
    /// An explicit-bucket histogram.
    Histogram,
}

impl MetricKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// The resource attribute a collector's fleet export carries: its series are a lower
/// tier's sums (their points keep their own `job`).
pub(crate) const ROLE: &str = "higgsmeter.collector.role";
/// [`ROLE`]'s value.
pub(crate) const ROLE_AGGREGATE: &str = "aggregate";
/// The resource attribute of a source forwarded with `include_sources`: the instance id
/// of the collector that forwarded it.
pub(crate) const FORWARDED_BY: &str = "higgsmeter.forwarded_by";

#[cfg(test)]
mod tests {
    use super::*;

    fn check<E: Label + PartialEq + std::fmt::Debug>() {
        assert_eq!(E::ALL.len(), E::COUNT);
        let mut seen = std::collections::HashSet::new();
        for (i, e) in E::ALL.iter().enumerate() {
            assert_eq!(e.index(), i, "{e:?} out of order");
            assert!(seen.insert(e.as_str()), "{e:?}: label value repeated");
        }
    }

    #[test]
    fn every_label_lists_its_members_in_index_order_with_distinct_values() {
        check::<Transport>();
        check::<RequestRefusal>();
        check::<CloseReason>();
        check::<SpanOutcome>();
        check::<DropReason>();
        check::<Listener>();
        check::<RefusalReason>();
    }

    #[test]
    fn a_table_is_indexed_by_its_members() {
        let t: By<Listener, std::sync::atomic::AtomicU64, { Listener::COUNT }> = By::default();
        t[Listener::Prometheus].fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let read: Vec<(Listener, u64)> = t
            .iter()
            .map(|(l, a)| (l, a.load(std::sync::atomic::Ordering::Relaxed)))
            .collect();
        assert_eq!(
            read,
            vec![
                (Listener::Grpc, 0),
                (Listener::Http, 0),
                (Listener::Prometheus, 2)
            ]
        );
    }
}

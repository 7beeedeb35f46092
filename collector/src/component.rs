//! What every receiver and exporter shares: its key (`type[/name]`, as the
//! OpenTelemetry Collector writes it), the map of configured instances under
//! `receivers` or `exporters`, what planning it may read, and what starting it gets
//! and returns.
//!
//! A component owns the rest in its own module: its serde settings, their validation
//! into a plan, the plan's summary lines, and how it binds and runs. The registries
//! (`receivers::ReceiverConfig`, `exporters::ExporterConfig`) list the types, one
//! line each. ADR 0016 has the layout and the drill for adding a component.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use tokio_util::sync::CancellationToken;

use tokio::net::TcpListener;

use crate::aggregate::Aggregator;
use crate::auth::BearerTokenAuthConfig;
use crate::error::Error;
use crate::forward::TraceForwarder;
use crate::labels::Listener;
use crate::self_metrics::SelfMetrics;
use crate::tls::{ALPN_H2, ALPN_HTTP1, TlsListener, TlsServerSettings};

/// A component's key under `receivers` or `exporters`: its type, and after a `/` an
/// optional name that tells instances of one type apart (`otlp/primary`,
/// `otlp/backup`). Pipelines name components by their whole key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComponentId {
    kind: String,
    name: Option<String>,
}

impl ComponentId {
    /// The instance of `kind` without a name (`otlp`).
    pub fn new(kind: &str) -> ComponentId {
        ComponentId {
            kind: kind.to_owned(),
            name: None,
        }
    }

    /// Reads `type` or `type/name` (the name may hold further `/`, as upstream).
    pub fn parse(key: &str) -> Result<ComponentId, String> {
        let (kind, name) = match key.split_once('/') {
            Some((kind, name)) => (kind, Some(name)),
            None => (key, None),
        };
        if kind.is_empty() {
            return Err(format!("`{key}` has no type before its `/`"));
        }
        if name.is_some_and(str::is_empty) {
            return Err(format!(
                "`{key}` has an empty name after its `/`: write `{kind}` or `{kind}/NAME`"
            ));
        }
        Ok(ComponentId {
            kind: kind.to_owned(),
            name: name.map(str::to_owned),
        })
    }

    /// The type (`otlp` of `otlp/primary`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The name (`primary` of `otlp/primary`), if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{}/{name}", self.kind),
            None => f.write_str(&self.kind),
        }
    }
}

/// The component types of one section (`receivers` or `exporters`): their names and
/// how each one's settings are read.
pub(crate) trait Registry: Sized {
    /// `receiver` or `exporter`, for errors.
    const WHAT: &'static str;
    /// Every type, in the order errors list them.
    const TYPES: &'static [&'static str];

    /// Reads the settings of `id` (whose type is one of [`Registry::TYPES`]) as the map's
    /// next value.
    fn read<'de, A: MapAccess<'de>>(id: &ComponentId, map: &mut A) -> Result<Self, A::Error>;
}

/// How a component type's settings are read from the config (the value under its
/// key): its module decides whether a bare key means its defaults
/// ([`defaults_if_null`]) or names what it needs ([`required`]).
pub(crate) trait ReadSettings: Sized {
    /// Reads the settings of `id` as the map's next value.
    fn read<'de, A: MapAccess<'de>>(id: &ComponentId, map: &mut A) -> Result<Self, A::Error>;
}

/// Declares a section's component types, one line each (`"type" => Variant(Settings)`):
/// the enum of their settings, its [`Registry`] (the type names, each read by its
/// settings' [`ReadSettings`]), and `settings()`, the configured instance behind the
/// section's trait (`ExporterSettings`, `ReceiverSettings`), which plans it. Adding a
/// type is its module plus its line here (ADR 0016, *the drill*).
macro_rules! registry {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $what:literal, dyn $settings_trait:path {
            $($(#[$vmeta:meta])* $key:literal => $variant:ident($settings:ty),)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub enum $name {
            $($(#[$vmeta])* $variant($settings),)+
        }

        impl $crate::component::Registry for $name {
            const WHAT: &'static str = $what;
            const TYPES: &'static [&'static str] = &[$($key),+];

            fn read<'de, A: ::serde::de::MapAccess<'de>>(
                id: &$crate::component::ComponentId,
                map: &mut A,
            ) -> Result<Self, A::Error> {
                $(
                    if id.kind() == $key {
                        let settings = <$settings as $crate::component::ReadSettings>::read(id, map)?;
                        return Ok($name::$variant(settings));
                    }
                )+
                Err(<A::Error as ::serde::de::Error>::custom(format!(
                    "unknown {} type `{}`",
                    $what,
                    id.kind()
                )))
            }
        }

        impl $name {
            /// The instance's settings, behind the section's trait.
            pub(crate) fn settings(&self) -> &dyn $settings_trait {
                match self {
                    $($name::$variant(s) => s,)+
                }
            }
        }
    };
}
pub(crate) use registry;

/// `receivers` or `exporters`: every configured instance by its key.
#[derive(Debug, Clone, PartialEq)]
pub struct Components<T>(pub BTreeMap<ComponentId, T>);

impl<T> Default for Components<T> {
    fn default() -> Self {
        Components(BTreeMap::new())
    }
}

impl<T> Components<T> {
    /// The instance configured under `id`.
    pub fn get(&self, id: &ComponentId) -> Option<&T> {
        self.0.get(id)
    }
}

impl<'de, T: Registry> Deserialize<'de> for Components<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys<T>(PhantomData<T>);

        impl<'de, T: Registry> Visitor<'de> for Keys<T> {
            type Value = Components<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a map of {}s, each under `type` or `type/name`", T::WHAT)
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Components::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let id = ComponentId::parse(&key).map_err(de::Error::custom)?;
                    if !T::TYPES.contains(&id.kind()) {
                        return Err(de::Error::custom(format!(
                            "unknown {} type `{}` (in `{key}`): this collector has {}",
                            T::WHAT,
                            id.kind(),
                            list(T::TYPES)
                        )));
                    }
                    let settings = T::read(&id, &mut map)?;
                    if out.insert(id, settings).is_some() {
                        return Err(de::Error::custom(format!("`{key}` is configured twice")));
                    }
                }
                Ok(Components(out))
            }
        }

        d.deserialize_any(Keys(PhantomData))
    }
}

/// `` `a`, `b` and `c` ``.
pub(crate) fn list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// Deserialises `key:` (YAML null) as the settings' defaults, as the OpenTelemetry
/// Collector does (for `#[serde(deserialize_with)]`).
pub(crate) fn null_is_default<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

/// Reads a component's settings where a bare key (YAML null) means its defaults.
pub(crate) fn defaults_if_null<'de, A, T>(map: &mut A) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(map.next_value::<Option<T>>()?.unwrap_or_default())
}

/// Reads a component's settings that have a required key (a bare key is an error
/// that says so).
pub(crate) fn required<'de, A, T>(id: &ComponentId, needs: &str, map: &mut A) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    map.next_value::<Option<T>>()?
        .ok_or_else(|| de::Error::custom(format!("`{id}` needs its settings, at least `{needs}`")))
}

/// What planning a component may read beyond its own settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanEnv<'a> {
    /// `extensions.bearertokenauth`.
    pub(crate) bearertokenauth: Option<&'a BearerTokenAuthConfig>,
    /// `service.extensions`, when written.
    pub(crate) extensions: Option<&'a [String]>,
}

/// What a component gets when it starts.
#[derive(Clone)]
pub(crate) struct Context {
    /// The aggregation.
    pub(crate) aggregator: Arc<Aggregator>,
    /// The self-metrics.
    pub(crate) stats: Arc<SelfMetrics>,
    /// The traces pipeline, when configured (the receivers hand it spans).
    pub(crate) traces: Option<Arc<TraceForwarder>>,
    /// Cancelled when this component's stage stops (receivers first, then exporters).
    pub(crate) stop: CancellationToken,
    /// Cancelled when the whole collector stops (file watchers: TLS, tokens).
    pub(crate) stopped: CancellationToken,
}

/// A component bound (its port taken, its files read) and ready to run.
pub(crate) struct Started {
    /// The listener and the address it took, for a component that listens.
    pub(crate) address: Option<(Listener, SocketAddr)>,
    /// Runs the component until its stage stops.
    pub(crate) run: BoxFuture<'static, ()>,
}

/// Takes a listening component's port and reads its TLS files (watched for rotation
/// until the collector stops): what each listener does first (`key`: its config key,
/// for errors).
pub(crate) async fn listen(
    ctx: &Context,
    kind: Listener,
    key: &str,
    addr: SocketAddr,
    tls: &Option<TlsServerSettings>,
) -> Result<(TcpListener, SocketAddr, Option<Arc<TlsListener>>), Error> {
    let alpn: &[u8] = match kind {
        Listener::Grpc => ALPN_H2,
        Listener::Http | Listener::Prometheus => ALPN_HTTP1,
    };
    let tls = crate::tls::start_listener(
        kind,
        &format!("{key}.tls"),
        tls,
        &[alpn],
        &ctx.stats,
        &ctx.stopped,
    )?;
    let listener = crate::net::bind(format!("{} ({key})", kind.role()), addr).await?;
    let addr = crate::net::local_addr(&listener)?;
    Ok((listener, addr, tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_type_and_optional_name() {
        let id = ComponentId::parse("otlp/primary").unwrap();
        assert_eq!((id.kind(), id.name()), ("otlp", Some("primary")));
        assert_eq!(id.to_string(), "otlp/primary");
        assert_eq!(
            ComponentId::parse("otlp").unwrap(),
            ComponentId::new("otlp")
        );
        assert_eq!(ComponentId::parse("otlp/a/b").unwrap().name(), Some("a/b"));
        assert!(ComponentId::parse("/x").unwrap_err().contains("no type"));
        assert!(
            ComponentId::parse("otlp/")
                .unwrap_err()
                .contains("empty name")
        );
    }

    #[test]
    fn names_are_listed_as_prose() {
        assert_eq!(list(&["a"]), "`a`");
        assert_eq!(list(&["a", "b", "c"]), "`a`, `b` and `c`");
    }
}

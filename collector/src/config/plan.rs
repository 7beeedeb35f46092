//! Validating a configuration into the [`Plan`] the collector runs: addresses resolved,
//! files and certificates read, pipelines checked, every error naming its key's path.

use std::path::Path;

use super::*;
use crate::component::{PlanEnv, Registry};

fn config_error(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Config {
        path: path.into(),
        message: message.into(),
    }
}

impl Config {
    /// Reads and validates a YAML file.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadConfig {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses YAML text (not yet validated: see [`Config::plan`]).
    pub fn from_yaml(text: &str) -> Result<Config, Error> {
        let value: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| Error::Yaml {
            message: e.to_string(),
        })?;
        let value = if value.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            value
        };
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            // `.`: the document itself; empty: a key named "" at the top level.
            let path = if path == "." || path.is_empty() {
                "(top level)".to_owned()
            } else {
                path
            };
            config_error(path, e.into_inner().to_string())
        })
    }

    /// Applies command-line settings: they set the unnamed instances (`otlp`,
    /// `prometheus`, ...), made if missing, and add them to a written metrics
    /// pipeline.
    pub fn apply(&mut self, o: &Overrides) {
        for (endpoint, http) in [(&o.grpc, false), (&o.http, true)] {
            let Some(ep) = endpoint else { continue };
            let id = ComponentId::new("otlp");
            let ReceiverConfig::Otlp(otlp) = self.receivers.0.entry(id).or_insert_with(|| {
                ReceiverConfig::Otlp(OtlpReceiver {
                    protocols: Protocols::default(),
                })
            });
            if http {
                otlp.protocols
                    .http
                    .get_or_insert_with(HttpReceiver::default)
                    .endpoint = ep.clone();
            } else {
                otlp.protocols
                    .grpc
                    .get_or_insert_with(GrpcReceiver::default)
                    .endpoint = ep.clone();
            }
            self.add_to_pipeline(true, "otlp");
        }
        if let Some(ep) = &o.prometheus {
            let e = self
                .exporters
                .0
                .entry(ComponentId::new("prometheus"))
                .or_insert_with(|| ExporterConfig::Prometheus(PrometheusExporter::default()));
            match e {
                ExporterConfig::Prometheus(p) => p.endpoint = ep.clone(),
                _ => {
                    *e = ExporterConfig::Prometheus(PrometheusExporter {
                        endpoint: ep.clone(),
                        ..PrometheusExporter::default()
                    })
                }
            }
            self.add_to_pipeline(false, "prometheus");
        }
        for (ep, kind) in [
            (&o.otlp_endpoint, "otlp"),
            (&o.otlphttp_endpoint, "otlphttp"),
        ] {
            let Some(ep) = ep else { continue };
            let slot = self.exporters.0.entry(ComponentId::new(kind));
            match slot {
                std::collections::btree_map::Entry::Occupied(mut e) => match e.get_mut() {
                    ExporterConfig::Otlp(x) | ExporterConfig::OtlpHttp(x) => {
                        x.endpoint = ep.clone();
                    }
                    other => *other = otlp_config(kind, ep),
                },
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(otlp_config(kind, ep));
                }
            }
            self.add_to_pipeline(false, kind);
        }
        match o.storage.as_deref() {
            None => {}
            Some("none") => {
                if let Some(agg) = &mut self.processors.higgsmeter {
                    agg.storage = "none".to_owned();
                }
            }
            Some(dir) => {
                self.extensions
                    .file_storage
                    .get_or_insert_with(FileStorageConfig::default)
                    .directory = PathBuf::from(dir);
                if let Some(agg) = &mut self.processors.higgsmeter {
                    agg.storage = "file_storage".to_owned();
                }
                if let Some(list) = &mut self.service.extensions
                    && !list.iter().any(|e| e == "file_storage")
                {
                    list.push("file_storage".to_owned());
                }
            }
        }
    }

    fn add_to_pipeline(&mut self, receiver: bool, name: &str) {
        if let Some(p) = &mut self.service.pipelines.metrics {
            let list = if receiver {
                &mut p.receivers
            } else {
                &mut p.exporters
            };
            if !list.iter().any(|n| n == name) {
                list.push(name.to_owned());
            }
        }
    }

    /// Validates everything and resolves addresses, before anything starts: each
    /// component named by a pipeline (or, without `service.pipelines.metrics`, each
    /// configured one) checks its own settings.
    pub fn plan(&self) -> Result<Plan, Error> {
        self.check_service()?;
        let all = |ids: Vec<&ComponentId>| ids.into_iter().map(ToString::to_string).collect();
        let pipeline = self
            .service
            .pipelines
            .metrics
            .clone()
            .unwrap_or_else(|| Pipeline {
                receivers: all(self.receivers.0.keys().collect()),
                processors: vec!["higgsmeter".to_owned()],
                exporters: all(self.exporters.0.keys().collect()),
            });
        let env = PlanEnv {
            bearertokenauth: self.extensions.bearertokenauth.as_ref(),
            extensions: self.service.extensions.as_deref(),
        };
        let path = "service.pipelines.metrics";
        let mut receivers = Vec::new();
        for (i, key) in pipeline.receivers.iter().enumerate() {
            let (id, r) = lookup(&self.receivers, key, &format!("{path}.receivers[{i}]"))?;
            receivers.extend(r.settings().plan(&id, env)?);
        }
        if receivers.is_empty() {
            return Err(config_error(
                format!("{path}.receivers"),
                "no receiver: nothing could send data",
            ));
        }
        for (i, name) in pipeline.processors.iter().enumerate() {
            if name != "higgsmeter" {
                return Err(config_error(
                    format!("{path}.processors[{i}]"),
                    format!(
                        "unknown processor `{name}`: this collector has `higgsmeter` (the aggregation)"
                    ),
                ));
            }
        }
        let mut exporters = Vec::new();
        for (i, key) in pipeline.exporters.iter().enumerate() {
            let (id, e) = lookup(&self.exporters, key, &format!("{path}.exporters[{i}]"))?;
            exporters.push(e.settings().metrics_plan(&id)?);
        }
        let traces = match &self.service.pipelines.traces {
            Some(p) => self.traces_plan(p)?,
            None => Vec::new(),
        };
        let aggregate = self.processors.higgsmeter.clone().unwrap_or_default();
        aggregate.validate().map_err(|(p, m)| config_error(p, m))?;
        Ok(Plan {
            receivers,
            exporters,
            traces,
            storage: self.storage(&aggregate)?,
            aggregate,
            shutdown_timeout: self.service.shutdown_timeout,
        })
    }

    /// `service.extensions` and `service.shutdown_timeout`.
    fn check_service(&self) -> Result<(), Error> {
        if let Some(list) = &self.service.extensions {
            for (i, name) in list.iter().enumerate() {
                let configured = match name.as_str() {
                    // Listed without a section: on with its defaults, as upstream.
                    "file_storage" => true,
                    "bearertokenauth" => self.extensions.bearertokenauth.is_some(),
                    _ => {
                        return Err(config_error(
                            format!("service.extensions[{i}]"),
                            format!(
                                "unknown extension `{name}`: this collector has `file_storage` and `bearertokenauth`"
                            ),
                        ));
                    }
                };
                if !configured {
                    return Err(config_error(
                        format!("service.extensions[{i}]"),
                        format!("extension `{name}` is not configured under `extensions`"),
                    ));
                }
            }
        }
        if self.service.shutdown_timeout.is_zero() {
            return Err(config_error(
                "service.shutdown_timeout",
                "must be more than 0",
            ));
        }
        Ok(())
    }

    /// Where the state lives. `processors.higgsmeter.storage` decides, whether or not
    /// `service.extensions` lists `file_storage` (an upstream-shaped list names only
    /// the extensions it configures): `extensions.file_storage.directory`, or its
    /// default; the start log and `--check-config` say where.
    fn storage(&self, aggregate: &AggregateConfig) -> Result<Option<PathBuf>, Error> {
        if aggregate.storage != "file_storage" {
            return Ok(None);
        }
        let dir = self
            .extensions
            .file_storage
            .clone()
            .unwrap_or_default()
            .directory;
        if dir.as_os_str().is_empty() {
            return Err(config_error(
                "extensions.file_storage.directory",
                "must name a directory",
            ));
        }
        Ok(Some(dir))
    }

    /// The traces pipeline: `otlp` receivers in (the metrics receivers' listeners),
    /// `batch` the only processor (batching is always on), `otlp` / `otlphttp`
    /// exporters (named or not) out.
    fn traces_plan(&self, p: &Pipeline) -> Result<Vec<OtlpPlan>, Error> {
        let path = "service.pipelines.traces";
        if p.receivers.is_empty() || p.exporters.is_empty() {
            return Err(config_error(
                path,
                "list `receivers: [otlp]` and at least one exporter (`otlp`, `otlphttp`)",
            ));
        }
        for (i, key) in p.receivers.iter().enumerate() {
            let rpath = format!("{path}.receivers[{i}]");
            lookup(&self.receivers, key, &rpath).map_err(|_| {
                config_error(
                    rpath.clone(),
                    format!("receiver `{key}`: traces come in on a configured `otlp` receiver"),
                )
            })?;
        }
        for (i, name) in p.processors.iter().enumerate() {
            if name != "batch" {
                return Err(config_error(
                    format!("{path}.processors[{i}]"),
                    format!("unknown traces processor `{name}`: only `batch` (always on)"),
                ));
            }
        }
        let mut out = Vec::new();
        for (i, key) in p.exporters.iter().enumerate() {
            let epath = format!("{path}.exporters[{i}]");
            let (id, e) = lookup(&self.exporters, key, &epath)?;
            match e.settings().traces_plan(&id) {
                Some(plan) => out.push(plan?),
                None => {
                    return Err(config_error(
                        epath,
                        format!(
                            "exporter `{key}` carries no traces: use an `otlp` or `otlphttp` exporter"
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// The settings of `otlp` or `otlphttp` pushing to `endpoint`.
fn otlp_config(kind: &str, endpoint: &str) -> ExporterConfig {
    let e = OtlpExporter::new(endpoint);
    if kind == "otlphttp" {
        ExporterConfig::OtlpHttp(e)
    } else {
        ExporterConfig::Otlp(e)
    }
}

/// The component a pipeline names by `key` (at `path`).
fn lookup<'a, T: Registry>(
    section: &'a Components<T>,
    key: &str,
    path: &str,
) -> Result<(ComponentId, &'a T), Error> {
    let id = ComponentId::parse(key).map_err(|m| config_error(path, m))?;
    if !T::TYPES.contains(&id.kind()) {
        return Err(config_error(
            path,
            format!(
                "unknown {} `{key}`: this collector has {}",
                T::WHAT,
                crate::component::list(T::TYPES)
            ),
        ));
    }
    let section_name = format!("{}s", T::WHAT);
    section.get(&id).map(|c| (id.clone(), c)).ok_or_else(|| {
        config_error(
            path,
            format!(
                "{} `{key}` is not configured under `{section_name}`",
                T::WHAT
            ),
        )
    })
}

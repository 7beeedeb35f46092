//! What the examples' tests share: the collector, in process, on free ports.
#![allow(clippy::unwrap_used, reason = "test code")]

use higgsmeter_collector::{Collector, Config, Overrides, RunningCollector};

/// A collector in this process on free ports (no state kept), shut down when dropped.
pub(crate) struct TestCollector {
    rt: tokio::runtime::Runtime,
    running: Option<RunningCollector>,
}

impl TestCollector {
    pub(crate) fn start() -> TestCollector {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let mut config = Config::default();
        config.apply(&Overrides {
            grpc: Some("127.0.0.1:0".into()),
            http: Some("127.0.0.1:0".into()),
            prometheus: Some("127.0.0.1:0".into()),
            storage: Some("none".into()),
            ..Default::default()
        });
        let running = rt
            .block_on(Collector::start(config.plan().unwrap()))
            .unwrap();
        TestCollector {
            rt,
            running: Some(running),
        }
    }

    pub(crate) fn running(&self) -> &RunningCollector {
        self.running.as_ref().unwrap()
    }

    /// `value` with the default OTLP ports replaced by this collector's.
    pub(crate) fn redirect(&self, value: &str) -> String {
        let a = self.running().addresses();
        value
            .replace("127.0.0.1:4317", &a.grpc.unwrap().to_string())
            .replace("127.0.0.1:4318", &a.http.unwrap().to_string())
    }
}

impl TestCollector {
    /// Shuts it down; whether it finished within its deadline.
    pub(crate) fn shutdown(mut self) -> bool {
        match self.running.take() {
            Some(running) => self.rt.block_on(running.shutdown()),
            None => true,
        }
    }
}

impl Drop for TestCollector {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            self.rt.block_on(running.shutdown());
        }
    }
}

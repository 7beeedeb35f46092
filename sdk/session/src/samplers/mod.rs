//! The four samplers the agent reads once per tick, each behind a trait so tests (and
//! other platforms) can put their own in.
//!
//! Every sampler runs on the agent's tick thread, never on the application's: a slow
//! read (an X server, a large `/proc`) delays the next tick, nothing else.

mod gpu;
mod process;
mod training;
mod window;

pub use gpu::{GpuSample, GpuSampler, NoGpu, NvmlGpu};
pub use process::{DEFAULT_PROCESS_RULES, ProcScanner, ProcessRule, ProcessSampler};
pub use training::{TrainingLogFollower, TrainingProgress, TrainingReading, TrainingSampler};
pub use window::{
    DEFAULT_WINDOW_RULES, WindowBucket, WindowField, WindowRule, WindowSampler, X11Window,
    default_window_rules,
};

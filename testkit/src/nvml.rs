//! The fake `libnvidia-ml.so.1` (`sdk/nvml/tests/fake_nvml/fake_nvml.c`), built with
//! gcc (or `$CC`) into the cargo target directory's `tmp/`, once per variant: the NVML
//! meter's tests and the session agent's read GPUs from it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// A build of the fake NVML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Every entry point.
    Complete,
    /// No `nvmlShutdown`.
    NoShutdown,
    /// No `nvmlInit_v2`.
    NoInit,
}

impl Variant {
    fn dir(self) -> &'static str {
        match self {
            Variant::Complete => "complete",
            Variant::NoShutdown => "no-shutdown",
            Variant::NoInit => "no-init",
        }
    }

    fn defines(self) -> &'static [&'static str] {
        match self {
            Variant::Complete => &[],
            Variant::NoShutdown => &["-DFAKE_NO_SHUTDOWN"],
            Variant::NoInit => &["-DFAKE_NO_INIT"],
        }
    }
}

/// The fake's C source.
pub fn source() -> PathBuf {
    crate::repo_root().join("sdk/nvml/tests/fake_nvml/fake_nvml.c")
}

/// Builds the fake library (once per variant and process; a build newer than the
/// source, by an earlier process, is reused) and returns its `libnvidia-ml.so.1`.
pub fn fake_library(variant: Variant) -> PathBuf {
    static BUILT: Mutex<BTreeMap<&'static str, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = built.get(variant.dir()) {
        return path.clone();
    }
    let source = source();
    let dir = crate::bins::target_dir()
        .join("tmp/fake_nvml")
        .join(variant.dir());
    std::fs::create_dir_all(&dir).expect("create the fake NVML build directory");
    let target = dir.join("libnvidia-ml.so.1");
    if is_newer(&target, &source) {
        built.insert(variant.dir(), target.clone());
        return target;
    }
    // Build beside the target and rename, so concurrent test binaries never load a
    // half-written library.
    let partial = dir.join(format!("libnvidia-ml.so.1.{}.partial", std::process::id()));
    let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "gcc".to_owned()))
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&partial)
        .arg(&source)
        .args(variant.defines())
        .output()
        .expect("run gcc (the tests build a fake libnvidia-ml.so.1 with it)");
    assert!(
        output.status.success(),
        "gcc failed to build the fake NVML:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&partial, &target).expect("move the fake NVML into place");
    built.insert(variant.dir(), target.clone());
    target
}

/// Whether `path` exists and was modified after `than`.
fn is_newer(path: &Path, than: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(path), modified(than)), (Some(a), Some(b)) if a > b)
}

//! The repository root and temporary directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The repository root (the workspace: the parent of `testkit/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ has a parent: the repository root")
        .to_path_buf()
}

/// A fresh directory under the system's temporary directory, unique in this process
/// (`higgsmeter-test-PID-NAME-N`); left in place (see [`TempDir`] for one removed on
/// drop).
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "higgsmeter-test-{}-{}-{}",
        std::process::id(),
        name,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("create the temporary directory {}: {e}", dir.display()));
    dir
}

/// A fresh temporary directory ([`temp_dir`]) removed, with what it holds, on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh directory named after `name`.
    pub fn new(name: &str) -> TempDir {
        TempDir {
            path: temp_dir(name),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path` joined to it.
    pub fn join(&self, path: impl AsRef<Path>) -> PathBuf {
        self.path.join(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

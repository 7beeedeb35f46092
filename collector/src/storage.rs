//! The `file_storage` extension: the directory where the aggregation state is
//! checkpointed, so a restarted collector continues every fleet series (no counter
//! reset, no spike, dead sources' counted time kept).
//!
//! One state file, `higgsmeter-collector.state`, written atomically: a temporary
//! file is written and fsynced, renamed over the old one, and the directory fsynced.
//! A crash at any moment leaves the previous complete state or the new one. A lock
//! file (`higgsmeter-collector.lock`, an exclusive `flock`) keeps a second collector
//! from sharing the directory. A state file that cannot be read, is corrupt or cut
//! short, or was written by a newer collector is moved aside (`*.bad-<unix time>`)
//! with one error line naming it, and the collector starts without state.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::aggregate::StateFile;
use crate::error::Error;

/// The state file's name inside the directory.
pub const STATE_FILE: &str = "higgsmeter-collector.state";
const TEMP_FILE: &str = ".higgsmeter-collector.state.tmp";
const LOCK_FILE: &str = "higgsmeter-collector.lock";

/// `extensions.file_storage`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileStorageConfig {
    /// Where the state lives (default `higgsmeter-data`, relative to the working
    /// directory, the way Prometheus keeps `data/`); created if missing.
    pub directory: PathBuf,
}

impl Default for FileStorageConfig {
    fn default() -> Self {
        FileStorageConfig {
            directory: PathBuf::from("higgsmeter-data"),
        }
    }
}

/// An open, locked storage directory.
#[derive(Debug)]
pub(crate) struct FileStorage {
    dir: PathBuf,
    state: PathBuf,
    temp: PathBuf,
    /// Held (locked) while the collector runs.
    _lock: File,
}

fn storage_error(dir: &Path, message: String) -> Error {
    Error::Storage {
        directory: dir.display().to_string(),
        message,
    }
}

impl FileStorage {
    /// Creates the directory if needed, locks it, and checks that a file can be
    /// written and synced there.
    pub(crate) fn open(dir: &Path) -> Result<FileStorage, Error> {
        fs::create_dir_all(dir)
            .map_err(|e| storage_error(dir, format!("cannot create it: {e}")))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| {
                storage_error(dir, format!("cannot write {}: {e}", lock_path.display()))
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(storage_error(
                    dir,
                    "another higgsmeter-collector holds it (give each collector its own directory)"
                        .into(),
                ));
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(storage_error(
                    dir,
                    format!("cannot lock {}: {e}", lock_path.display()),
                ));
            }
        }
        let storage = FileStorage {
            dir: dir.to_path_buf(),
            state: dir.join(STATE_FILE),
            temp: dir.join(TEMP_FILE),
            _lock: lock,
        };
        storage
            .write_temp(|_| Ok(()))
            .and_then(|()| fs::remove_file(&storage.temp))
            .map_err(|e| storage_error(dir, format!("cannot write a file there: {e}")))?;
        Ok(storage)
    }

    /// The state file's path.
    pub(crate) fn state_path(&self) -> &Path {
        &self.state
    }

    /// Reads the state, if there is one. A file that cannot be used is moved aside,
    /// with one error line naming it; the collector then starts without state.
    pub(crate) fn load(&self) -> Option<StateFile> {
        let bytes = match fs::read(&self.state) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.set_aside(&format!("cannot be read: {e}"));
                return None;
            }
        };
        match StateFile::decode(&bytes) {
            Ok(state) => Some(state),
            Err(e) => {
                self.set_aside(&e.to_string());
                None
            }
        }
    }

    /// Moves an unusable state file aside, saying why.
    pub(crate) fn set_aside(&self, why: &str) {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = self.dir.join(format!("{STATE_FILE}.bad-{secs}"));
        match fs::rename(&self.state, &aside) {
            Ok(()) => tracing::error!(
                "state file {} {why}; moved aside to {}; starting without state (sources that started earlier count from their next point)",
                self.state.display(),
                aside.display()
            ),
            Err(e) => tracing::error!(
                "state file {} {why}; could not move it aside ({e}); starting without state, and the next checkpoint replaces it",
                self.state.display()
            ),
        }
    }

    fn write_temp(&self, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.temp)?;
        fill(&mut file)?;
        file.sync_all()
    }

    /// Replaces the state file atomically (temporary file, fsync, rename, fsync of
    /// the directory). On an error the previous state file is untouched.
    #[cfg(test)]
    pub(crate) fn write(&self, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write as _;
        self.write_with(|file| file.write_all(bytes))
    }

    /// Replaces the state file atomically with what `fill` writes into the temporary
    /// file (from its start; it may seek back within what it wrote), as
    /// [`FileStorage::write`] does.
    pub(crate) fn write_with(
        &self,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        if let Err(e) = self.write_temp(fill) {
            let _ = fs::remove_file(&self.temp);
            return Err(e);
        }
        fs::rename(&self.temp, &self.state)?;
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("higgsmeter-storage-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_collector_cannot_share_the_directory() {
        let dir = temp_dir("lock");
        let first = FileStorage::open(&dir).unwrap();
        let err = FileStorage::open(&dir).unwrap_err().to_string();
        assert!(err.contains("another higgsmeter-collector"), "{err}");
        drop(first);
        FileStorage::open(&dir).unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_keeps_the_previous_state() {
        let dir = temp_dir("full");
        let storage = FileStorage::open(&dir).unwrap();
        storage.write(b"first").unwrap();
        // /dev/full refuses every write with ENOSPC, as a full disk does.
        std::os::unix::fs::symlink("/dev/full", &storage.temp).unwrap();
        let err = storage.write(b"second").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        assert_eq!(fs::read(storage.state_path()).unwrap(), b"first");
        // The failed temporary is gone: the next write succeeds.
        storage.write(b"third").unwrap();
        assert_eq!(fs::read(storage.state_path()).unwrap(), b"third");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn unusable_state_files_are_moved_aside() {
        let dir = temp_dir("corrupt");
        let storage = FileStorage::open(&dir).unwrap();
        fs::write(storage.state_path(), b"HGMSTATE\x01\0\0\0 cut short").unwrap();
        assert!(storage.load().is_none());
        assert!(!storage.state_path().exists());
        let aside: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".bad-"))
            .collect();
        assert_eq!(aside.len(), 1);
        let _ = fs::remove_dir_all(&dir);
    }
}

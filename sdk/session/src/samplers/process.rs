//! Which watched processes are running: a scan of `/proc`.

use std::path::{Path, PathBuf};

/// Finds the watched processes running now.
pub trait ProcessSampler: Send {
    /// Fills `out` (cleared by the caller) with the names of the watched processes
    /// running now, each once.
    fn processes_seen(&mut self, out: &mut Vec<String>);
}

/// One watched process: the name it is reported as, and how to recognise it.
///
/// A process matches when its name (`/proc/PID/comm`, which the kernel cuts to 15
/// bytes), or the file name of its `argv[0]`, is `name`; when it is a Python
/// interpreter running a script whose file name is `name` (`python3 /usr/bin/sleap-label`);
/// or when its command line (arguments joined by spaces) contains `pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRule {
    /// The name reported in `processes_seen` (and the `session.process.name` label).
    pub name: String,
    /// A substring of the command line that also identifies the process.
    pub pattern: Option<String>,
}

impl ProcessRule {
    /// A rule for `name`, with an optional command-line `pattern`.
    pub fn new(name: impl Into<String>, pattern: Option<&str>) -> Self {
        ProcessRule {
            name: name.into(),
            pattern: pattern.map(str::to_owned),
        }
    }

    fn matches(&self, comm: &str, argv: &[&str]) -> bool {
        let name = self.name.as_str();
        let comm_name = name.get(..15).unwrap_or(name);
        if comm == comm_name {
            return true;
        }
        let base = |arg: &str| -> String {
            Path::new(arg)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        if let Some(first) = argv.first() {
            let first = base(first);
            if first == name {
                return true;
            }
            if first.starts_with("python") && argv.get(1).is_some_and(|script| base(script) == name)
            {
                return true;
            }
        }
        match &self.pattern {
            Some(pattern) if !pattern.is_empty() => argv.join(" ").contains(pattern.as_str()),
            _ => false,
        }
    }
}

/// The default watched processes: SLEAP's three entry points, by name or by the module
/// each runs (`python -m sleap.nn.training`, ...).
pub const DEFAULT_PROCESS_RULES: [(&str, &str); 3] = [
    ("sleap-label", "sleap.gui.app"),
    ("sleap-train", "sleap.nn.training"),
    ("sleap-track", "sleap.nn.inference"),
];

/// Scans `/proc` (or another procfs mount) for the watched processes.
///
/// Processes that end during the scan, or whose files cannot be read (another user's,
/// under `hidepid`), are skipped; the agent's own process is never reported.
#[derive(Debug, Clone)]
pub struct ProcScanner {
    root: PathBuf,
    rules: Vec<ProcessRule>,
    own_pid: u32,
    warned: bool,
}

impl Default for ProcScanner {
    fn default() -> Self {
        ProcScanner::new(
            DEFAULT_PROCESS_RULES
                .iter()
                .map(|(name, pattern)| ProcessRule::new(*name, Some(pattern)))
                .collect(),
        )
    }
}

impl ProcScanner {
    /// A scanner of `/proc` for `rules`.
    pub fn new(rules: Vec<ProcessRule>) -> Self {
        ProcScanner {
            root: PathBuf::from("/proc"),
            rules,
            own_pid: std::process::id(),
            warned: false,
        }
    }

    /// Scans `root` instead of `/proc`.
    pub fn with_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = root.into();
        self
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> &[ProcessRule] {
        &self.rules
    }
}

impl ProcessSampler for ProcScanner {
    fn processes_seen(&mut self, out: &mut Vec<String>) {
        if self.rules.is_empty() {
            return;
        }
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) => {
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(
                        root = %self.root.display(),
                        error = %e,
                        "cannot list processes; no process will be seen (logged once)"
                    );
                }
                return;
            }
        };
        let mut cmdline = Vec::new();
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let Some(pid) = file_name.to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if pid == self.own_pid {
                continue;
            }
            let dir = entry.path();
            let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
                continue;
            };
            cmdline.clear();
            if let Ok(bytes) = std::fs::read(dir.join("cmdline")) {
                cmdline = bytes;
            }
            let text = String::from_utf8_lossy(&cmdline);
            let argv: Vec<&str> = text.split('\0').filter(|a| !a.is_empty()).collect();
            for rule in &self.rules {
                if !out.contains(&rule.name) && rule.matches(comm.trim_end_matches('\n'), &argv) {
                    out.push(rule.name.clone());
                }
            }
            if out.len() == self.rules.len() {
                break;
            }
        }
        out.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_by_name_script_or_pattern() {
        let rule = ProcessRule::new("sleap-train", Some("sleap.nn.training"));
        assert!(rule.matches("sleap-train", &[]));
        assert!(rule.matches(
            "python3",
            &["/opt/env/bin/python3", "/opt/env/bin/sleap-train"]
        ));
        assert!(rule.matches(
            "python3",
            &["python3", "-m", "sleap.nn.training", "cfg.json"]
        ));
        assert!(rule.matches("x", &["/usr/local/bin/sleap-train", "cfg.json"]));
        // An editor on a file of that name is not the process.
        assert!(!rule.matches("vim", &["vim", "sleap-train"]));
        assert!(!rule.matches("sleap-track", &["sleap-track"]));
        // comm is cut to 15 bytes.
        let long = ProcessRule::new("a-very-long-process-name", None);
        assert!(long.matches("a-very-long-pro", &[]));
    }
}

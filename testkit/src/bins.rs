//! The workspace's binaries, as cargo built them: found next to the running test
//! executable, never built by a test.
//!
//! `cargo test` puts a test executable in `target/<profile>/deps/` and the workspace's
//! binaries in `target/<profile>/`. `cargo test --workspace` builds every package's
//! binaries before any test runs; `cargo test -p P` builds only P's. A test of one
//! package that starts another package's binary (the e2e tests start the collector,
//! the collector's tests the examples' `demo`) therefore needs `cargo test --workspace`
//! (filter the tests as you like) or a `cargo build --workspace --bins` first: a
//! missing binary fails the test with that command. An environment variable can point
//! at a binary built elsewhere.

use std::path::{Path, PathBuf};

/// The command that builds every binary the tests start.
pub const BUILD_COMMAND: &str = "cargo build --workspace --bins";

/// The directory cargo put the running test executable's binaries in
/// (`target/<profile>`, or `target/<triple>/<profile>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test executable's path");
    let dir = exe
        .parent()
        .expect("the test executable is in a directory")
        .to_path_buf();
    // Integration tests and unit tests run from `deps/`; a binary's own tests may not.
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent()
            .expect("deps/ is in the profile directory")
            .to_path_buf()
    } else {
        dir
    }
}

/// The cargo target directory of the running test executable (where `tmp/` is).
pub fn target_dir() -> PathBuf {
    let profile = profile_dir();
    // `target/<profile>` or `target/<triple>/<profile>`: the one holding `CACHEDIR.TAG`.
    profile
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").exists())
        .unwrap_or_else(|| profile.parent().unwrap_or(&profile))
        .to_path_buf()
}

/// The workspace binary `name` of `package`: `$env_override` if given and set, else
/// `target/<profile>/<name>` beside the running test. Panics, saying how to build
/// it, when it is missing.
pub fn workspace_bin(package: &str, name: &str, env_override: Option<&str>) -> PathBuf {
    if let Some((var, path)) = env_override.and_then(|v| Some((v, std::env::var_os(v)?))) {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "{var}={} is not a file", path.display());
        return path;
    }
    let path = profile_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is missing: this test starts the binary `{name}` of package `{package}`, which \
         `cargo test -p` of another package does not build. Run the tests with `cargo test \
         --workspace` (it builds every binary first; add a test filter as you like), or \
         build the binaries with `{BUILD_COMMAND}`{} first{}.",
        path.display(),
        if is_release(&path) { " --release" } else { "" },
        env_override
            .map(|v| format!("; or set {v} to a binary built elsewhere"))
            .unwrap_or_default(),
    );
    path
}

fn is_release(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "release")
}

/// The collector binary (`higgsmeter-collector`); `HIGGSMETER_COLLECTOR_BIN`
/// overrides.
pub fn collector() -> PathBuf {
    workspace_bin(
        "higgsmeter-collector",
        "higgsmeter-collector",
        Some("HIGGSMETER_COLLECTOR_BIN"),
    )
}

/// The examples' demo (`higgsmeter-examples`' `demo`, whose hidden `worker`
/// subcommand is one simulated rank); `HIGGSMETER_DEMO_BIN` overrides.
pub fn demo() -> PathBuf {
    workspace_bin("higgsmeter-examples", "demo", Some("HIGGSMETER_DEMO_BIN"))
}

/// Another binary of `higgsmeter-examples` (e.g. `lifecycle-worker`).
pub fn example(name: &str) -> PathBuf {
    workspace_bin("higgsmeter-examples", name, None)
}

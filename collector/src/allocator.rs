//! The allocator's options, lean by default. mimalloc commits whole arenas up front on
//! Linux (`arena_eager_commit`): at 100,000 points/s that held the collector at 36-40
//! MiB instead of 18 (BENCHMARKS.md, *Footprint: lean by default*), at the same CPU and
//! max-rate throughput. Its other memory option, `purge_delay` (freed memory kept 1 s
//! for reuse), is left alone: at 0 it saved nothing more at that rate and made each
//! `/metrics` of 100 k series cost 50-60 % more CPU, its 60 MB of buffers faulted in
//! afresh every time.
//!
//! mimalloc reads its options from the environment when the process loads, and sets up
//! its arenas before `main`: an option set from `main` (`mi_option_set`) changes the
//! number but not the arenas already made, and measured no change in RSS. So when the
//! environment does not name it, the binary runs itself again at once with
//! `MIMALLOC_ARENA_EAGER_COMMIT=0` (`exec`: the same process id, arguments and standard
//! streams; about a millisecond). An operator's own value is left as it is. Only the binary does this; the library leaves the
//! allocator to the program that embeds it.

/// The options and their lean values.
pub(crate) const LEAN: [(&str, &str); 1] = [("MIMALLOC_ARENA_EAGER_COMMIT", "0")];

/// Runs this binary again with the lean options when the environment lacks one of
/// them; returns (with the allocator's defaults) only if that cannot be done.
pub(crate) fn lean() {
    let missing: Vec<(&str, &str)> = LEAN
        .iter()
        .copied()
        .filter(|(name, _)| std::env::var_os(name).is_none())
        .collect();
    if missing.is_empty() {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let mut cmd = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            cmd.arg0(arg0);
        }
        // `exec` returns only on failure: then go on with mimalloc's defaults.
        let error = cmd.args(args).envs(missing).exec();
        eprintln!(
            "higgsmeter-collector: could not apply the lean allocator options ({error}); running with mimalloc's defaults (set MIMALLOC_ARENA_EAGER_COMMIT=0 to save memory)"
        );
    }
}

//! The allocator's options, lean by default: mimalloc keeps freed memory for a while
//! (`purge_delay`: 1 s in the mimalloc v3 that `libmimalloc-sys` builds) and commits
//! whole arenas up front on
//! Linux (`arena_eager_commit`), which at 100,000 points/s held the collector at
//! 50-59 MiB instead of about 20 (BENCHMARKS.md, *Footprint*). The binary sets both to
//! 0 before it starts anything; max-rate ingest is unchanged (same section).
//!
//! An operator's own `MIMALLOC_PURGE_DELAY` or `MIMALLOC_ARENA_EAGER_COMMIT` wins:
//! those are read when the process loads, and are left as they are.

/// mimalloc's option ids, from `mimalloc.h` (v3, the version `libmimalloc-sys` builds;
/// v2 numbers them the same). The test below checks each against its default in v3's
/// `options.c`, so a renumbering fails the tests rather than setting another option.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Sets the lean options, unless the environment set them.
pub(crate) fn lean() {
    for (option, env) in [
        (PURGE_DELAY, "MIMALLOC_PURGE_DELAY"),
        (ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT"),
    ] {
        if std::env::var_os(env).is_none() {
            set(option, 0);
        }
    }
}

/// The one `unsafe` of the binary.
#[allow(unsafe_code)]
fn set(option: libmimalloc_sys::mi_option_t, value: std::ffi::c_long) {
    // SAFETY: `mi_option_set` stores a number in mimalloc's option table (an atomic
    // store after the table's one-time initialisation at load); `option` is a valid
    // id (checked by the test below), and no memory is handed over.
    unsafe { libmimalloc_sys::mi_option_set(option, value) }
}

/// An option's value now.
#[cfg(test)]
#[allow(unsafe_code)]
fn get(option: libmimalloc_sys::mi_option_t) -> std::ffi::c_long {
    // SAFETY: reads mimalloc's option table; `option` is a valid id.
    unsafe { libmimalloc_sys::mi_option_get(option) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lean_options_take_effect_and_the_ids_are_the_right_ones() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some()
            || std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_some()
        {
            eprintln!("skipped: the environment sets mimalloc's options");
            return;
        }
        // v3 options.c's defaults: purge_delay 1000 (ms), arena_eager_commit 2.
        assert_eq!(get(PURGE_DELAY), 1000, "PURGE_DELAY is not purge_delay");
        assert_eq!(get(ARENA_EAGER_COMMIT), 2, "not arena_eager_commit");
        lean();
        assert_eq!(get(PURGE_DELAY), 0);
        assert_eq!(get(ARENA_EAGER_COMMIT), 0);
    }
}

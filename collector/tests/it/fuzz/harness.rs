//! The run loop every target shares: a budget from the environment, proptest's runner
//! on a seeded RNG, and a failure report that says how to reproduce it.

use std::fmt::Debug;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{
    Config as ProptestConfig, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner,
};

/// The CI run's first seed: fixed, so that CI is reproducible.
const CI_SEED: u64 = 0x6869_6767_736d_6574;

/// How long and how hard each target runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// Cases per round.
    pub(crate) cases: u32,
    /// Rounds go on (new seeds) until this much time has passed; `None`: one round.
    pub(crate) secs: Option<Duration>,
    /// The first round's seed.
    pub(crate) seed: u64,
}

impl Budget {
    /// The budget for a target whose CI run has `ci_cases` cases.
    pub(crate) fn from_env(ci_cases: u32) -> Budget {
        let cases = std::env::var("HIGGSMETER_FUZZ_CASES")
            .ok()
            .map(|v| v.trim().parse().expect("HIGGSMETER_FUZZ_CASES: a number"))
            .unwrap_or(ci_cases);
        let secs = std::env::var("HIGGSMETER_FUZZ_SECS")
            .ok()
            .map(|v| Duration::from_secs(v.trim().parse().expect("HIGGSMETER_FUZZ_SECS: seconds")));
        let seed = match std::env::var("HIGGSMETER_FUZZ_SEED").ok().as_deref() {
            None => CI_SEED,
            Some("random") => {
                use std::hash::{BuildHasher as _, Hasher as _};
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u128(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos()),
                );
                h.finish()
            }
            Some(v) => v
                .trim()
                .parse()
                .expect("HIGGSMETER_FUZZ_SEED: a number or random"),
        };
        Budget { cases, secs, seed }
    }
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&seed.rotate_left(i as u32 * 16).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Runs `test` on inputs drawn from `strategy` within the budget; on a failure,
/// panics with the shrunk input and the command that reproduces it.
pub(crate) fn fuzz<S>(
    target: &str,
    ci_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let budget = Budget::from_env(ci_cases);
    let started = Instant::now();
    let mut round = 0u64;
    let mut cases = 0u64;
    loop {
        let seed = budget.seed.wrapping_add(round);
        let config = ProptestConfig {
            cases: budget.cases,
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..ProptestConfig::default()
        };
        let mut runner = TestRunner::new_with_rng(config, rng(seed));
        match runner.run(&strategy, &test) {
            Ok(()) => {}
            Err(TestError::Fail(why, input)) => panic!(
                "fuzz target {target} failed: {why}\nminimal input: {input:?}\n\
                 reproduce: HIGGSMETER_FUZZ_SEED={seed} HIGGSMETER_FUZZ_CASES={} \
                 cargo test -p higgsmeter-collector --test it -- {}",
                budget.cases,
                test_filter(target)
            ),
            Err(TestError::Abort(why)) => panic!("fuzz target {target} aborted: {why}"),
        }
        round += 1;
        cases += u64::from(budget.cases);
        match budget.secs {
            Some(secs) if started.elapsed() < secs => {}
            _ => break,
        }
    }
    eprintln!(
        "fuzz target {target}: {cases} cases in {round} round(s) from seed {}, {:.1?}",
        budget.seed,
        started.elapsed()
    );
}

/// The test filter that runs just this target: `--exact` and the running test's full name
/// (`fuzz::otlp::otlp_protobuf`, libtest names each test's thread after it), or the
/// target's name where the thread has none.
fn test_filter(target: &str) -> String {
    match std::thread::current().name() {
        Some(name) if name.ends_with(target) => format!("--exact {name}"),
        _ => target.to_owned(),
    }
}

/// The seed corpus directory.
pub(crate) fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fuzz/corpus")
}

/// Every corpus file whose name ends with `suffix`, sorted by name.
pub(crate) fn corpus(suffix: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir())
        .expect("tests/it/fuzz/corpus")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(suffix)
                .then(|| (name, std::fs::read(e.path()).expect("corpus file")))
        })
        .collect();
    out.sort();
    out
}

/// How often each outcome came up, printed after a run (`--nocapture`): a target
/// whose inputs are all refused early tests little.
#[derive(Debug, Default)]
pub(crate) struct Tally(std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>);

impl Tally {
    /// Counts one `outcome`.
    pub(crate) fn add(&self, outcome: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome)
            .or_insert(0) += 1;
    }

    /// Prints the counts.
    pub(crate) fn report(&self, target: &str) {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        eprintln!("fuzz target {target} outcomes: {counts:?}");
    }
}

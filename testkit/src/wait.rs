//! Bounded polling: one loop ([`Wait::until`]) and the forms the tests call it in.
//! Nothing here asserts a timing: a limit only stops a wait that would never end.

use std::time::{Duration, Instant};

/// When a wait gives up.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// After this long.
    For(Duration),
    /// After this many checks.
    Tries(u32),
}

/// How long to keep checking, and how often.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    limit: Limit,
    every: Duration,
}

impl Wait {
    /// Checks every 50 ms for up to `timeout`.
    pub fn up_to(timeout: Duration) -> Wait {
        Wait {
            limit: Limit::For(timeout),
            every: Duration::from_millis(50),
        }
    }

    /// Checks at most `tries` times, `every` apart.
    pub fn tries(tries: u32, every: Duration) -> Wait {
        Wait {
            limit: Limit::Tries(tries),
            every,
        }
    }

    /// The same limit, checking every `every`.
    pub fn every(self, every: Duration) -> Wait {
        Wait { every, ..self }
    }

    /// Calls `check` until it returns `Ok` (its value) or the limit passes (`Err` with
    /// the last check's error). The one polling loop of the kit.
    pub fn until<T, E>(self, mut check: impl FnMut() -> Result<T, E>) -> Result<T, E> {
        let start = Instant::now();
        let mut tries = 0u32;
        loop {
            let last = match check() {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            tries += 1;
            let over = match self.limit {
                Limit::For(limit) => start.elapsed() >= limit,
                Limit::Tries(limit) => tries >= limit,
            };
            if over {
                return Err(last);
            }
            std::thread::sleep(self.every);
        }
    }
}

/// Polls `f` (every 50 ms) until it returns `Some`; panics with `what` after `timeout`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    Wait::up_to(timeout)
        .until(|| f().ok_or(()))
        .unwrap_or_else(|()| panic!("timed out waiting for {what}"))
}

/// [`wait_for`], with the message built when it times out.
pub fn wait_for_or<T>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    Wait::up_to(timeout)
        .until(|| f().ok_or(()))
        .unwrap_or_else(|()| panic!("timed out waiting for {}", what()))
}

/// Calls `check` (at most `tries` times, 250 ms apart) until it returns `Ok`; panics
/// with the last error otherwise.
pub fn eventually<T>(tries: u32, check: impl FnMut() -> Result<T, String>) -> T {
    Wait::tries(tries, Duration::from_millis(250))
        .until(check)
        .unwrap_or_else(|last| panic!("not reached after {tries} tries: {last}"))
}

/// Polls `done` (every 20 ms, for up to 30 s) until it holds; panics with `what`
/// otherwise.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    Wait::up_to(Duration::from_secs(30))
        .every(Duration::from_millis(20))
        .until(|| if done() { Ok(()) } else { Err(()) })
        .unwrap_or_else(|()| panic!("{what}: not within 30 s"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_returns_the_first_ok_or_the_last_error() {
        let mut n = 0;
        let got = Wait::tries(5, Duration::ZERO).until(|| {
            n += 1;
            if n == 3 { Ok(n) } else { Err(n) }
        });
        assert_eq!(got, Ok(3));
        let mut n = 0;
        let got: Result<(), u32> = Wait::tries(4, Duration::ZERO).until(|| {
            n += 1;
            Err(n)
        });
        assert_eq!(got, Err(4));
    }

    #[test]
    #[should_panic(expected = "timed out waiting for nothing")]
    fn wait_for_panics_with_what_it_waited_for() {
        wait_for(Duration::from_millis(60), "nothing", || None::<()>);
    }
}

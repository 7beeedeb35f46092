//! The session agent's integration tests, one test binary (`cargo test -p
//! higgsmeter-session --test it`): each module is one former test binary, its own `//!`
//! says what it checks.

mod support;

mod export;
mod parity;
mod push;
mod run;
mod samplers;
mod x11;

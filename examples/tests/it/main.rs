//! The examples' integration tests, one test binary (`cargo test -p higgsmeter-examples
//! --test it`): each module is one former test binary, its own `//!` says what it checks.

mod doc_commands;
mod run;

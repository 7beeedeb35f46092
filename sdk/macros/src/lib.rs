//! The `#[track_state(...)]` attribute of [higgsmeter](https://docs.rs/higgsmeter).
//!
//! Use it through `higgsmeter::track_state`; this crate is an implementation detail and
//! its generated code calls only `higgsmeter::__private`, which is not a stable API.
//!
//! ```ignore
//! use higgsmeter::{track_state, AppState};
//!
//! #[track_state(AppState::Io)]                           // operation = "download"
//! fn download(url: &str) { /* ... */ }
//!
//! #[track_state(AppState::Io, operation = "s3_get")]     // async: first poll to completion or drop
//! async fn get(key: &str) { /* ... */ }
//! ```

mod attr;
mod expand;

use proc_macro::TokenStream;

/// Marks a function as time spent in a worker state.
///
/// `#[track_state(STATE)]` or `#[track_state(STATE, operation = "name")]`, where `STATE`
/// is any expression of type `higgsmeter::AppState` and the operation defaults to the
/// function's name. A sync function opens a state scope for its whole body; an async
/// function instruments its body's future with a state span, so awaiting (the network,
/// a lock, a queue) counts in the state too, until the future completes or is dropped.
#[proc_macro_attribute]
pub fn track_state(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = match syn::parse::<attr::Args>(args) {
        Ok(args) => args,
        Err(e) => return e.to_compile_error().into(),
    };
    match expand::expand(args, item.into()) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

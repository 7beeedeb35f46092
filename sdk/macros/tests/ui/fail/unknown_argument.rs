use higgsmeter::{track_state, AppState};

#[track_state(AppState::Io, op = "x")]
fn typo() {}

fn main() {}

use higgsmeter::{track_state, AppState};

#[track_state(AppState::Io)]
struct NotAFunction;

fn main() {}

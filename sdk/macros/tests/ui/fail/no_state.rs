use higgsmeter::track_state;

#[track_state]
fn missing() {}

fn main() {}

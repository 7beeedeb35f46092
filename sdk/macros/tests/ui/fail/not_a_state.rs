use higgsmeter::track_state;

#[track_state("io")]
fn wrong_type() {}

fn main() {}

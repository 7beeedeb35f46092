use higgsmeter::{track_state, AppState};

#[track_state(AppState::Io)]
fn plain() {}

#[track_state(AppState::Gpu, operation = "inference")]
pub fn with_operation(x: u32) -> u32 {
    x
}

#[track_state(AppState::Io)]
async fn returns_impl() -> impl std::fmt::Display {
    1
}

#[track_state(AppState::Cpu)]
async fn with_question_mark(s: &str) -> Result<u8, Box<dyn std::error::Error>> {
    Ok(s.parse::<u8>()?)
}

struct Client;
impl Client {
    #[track_state(AppState::Io)]
    async fn method(&self, key: &str) -> usize {
        key.len()
    }
}

fn main() {
    plain();
    let _ = with_operation(1);
    let _ = returns_impl();
    let _ = with_question_mark("1");
    let _ = Client.method("k");
}

#[track_state(AppState::Io)]
async fn nested_impl() -> (u8, Box<dyn Fn() -> u8>) {
    (1, Box::new(|| 2))
}

#[allow(dead_code)]
#[track_state(AppState::Io)]
async fn impl_in_tuple() -> (u8, impl std::fmt::Debug) {
    (1, 2)
}

//! The window sampler against a real X server (Xvfb): windows with known `WM_CLASS`,
//! `_NET_ACTIVE_WINDOW` set on the root window with `xprop`, and the bucket times
//! growing in the agent's counters.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use higgsmeter_session::{
    NoGpu, ProcScanner, SessionAgent, WindowBucket, WindowSampler, X11Window,
};
use higgsmeter_testkit::wait_until;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    AtomEnum, ConnectionExt as _, CreateWindowAux, PropMode, WindowClass,
};
use x11rb::wrapper::ConnectionExt as _;

/// An Xvfb server, killed when dropped.
struct Xvfb {
    child: Child,
    display: String,
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn xvfb() -> Xvfb {
    // -displayfd: Xvfb picks a free display and writes its number when it is ready.
    let mut child = Command::new("Xvfb")
        .args([
            "-displayfd",
            "1",
            "-nolisten",
            "tcp",
            "-screen",
            "0",
            "320x240x24",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run Xvfb (Debian's xvfb package; `bash .ci/setup` installs it)");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let number: u32 = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("Xvfb wrote `{line}`"));
    Xvfb {
        child,
        display: format!(":{number}"),
    }
}

/// Sets the root window's `_NET_ACTIVE_WINDOW` with xprop, as a window manager would.
fn set_active(display: &str, window: u32) {
    let status = Command::new("xprop")
        .args([
            "-display",
            display,
            "-root",
            "-f",
            "_NET_ACTIVE_WINDOW",
            "32c",
            "-set",
        ])
        .args(["_NET_ACTIVE_WINDOW", &window.to_string()])
        .status()
        .expect("run xprop (Debian's x11-utils; `bash .ci/setup` installs it)");
    assert!(status.success());
}

/// A window with this `WM_CLASS` (instance, class) and title.
fn window(conn: &impl Connection, root: u32, class: (&str, &str), title: &str) -> u32 {
    let id = conn.generate_id().unwrap();
    conn.create_window(
        0,
        id,
        root,
        0,
        0,
        10,
        10,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new(),
    )
    .unwrap();
    let wm_class = format!("{}\0{}\0", class.0, class.1);
    conn.change_property8(
        PropMode::REPLACE,
        id,
        AtomEnum::WM_CLASS,
        AtomEnum::STRING,
        wm_class.as_bytes(),
    )
    .unwrap();
    conn.change_property8(
        PropMode::REPLACE,
        id,
        AtomEnum::WM_NAME,
        AtomEnum::STRING,
        title.as_bytes(),
    )
    .unwrap();
    conn.map_window(id).unwrap();
    conn.sync().unwrap();
    id
}

#[test]
fn the_active_windows_bucket_time_grows_on_a_real_x_server() {
    let x = xvfb();
    let (conn, screen) = x11rb::connect(Some(&x.display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let firefox = window(
        &conn,
        root,
        ("Navigator", "firefox"),
        "Docs — Mozilla Firefox",
    );
    let terminal = window(&conn, root, ("xterm", "XTerm"), "bash");
    let sleap = window(
        &conn,
        root,
        ("python3", "Python3"),
        "SLEAP - labels.v001.slp",
    );

    // The sampler alone, once per window.
    let mut sampler = X11Window::default().with_display(x.display.clone());
    // No _NET_ACTIVE_WINDOW yet (no window manager): other.
    assert_eq!(sampler.bucket(), WindowBucket::Other);
    for (id, bucket) in [
        (firefox, WindowBucket::Browser),
        (terminal, WindowBucket::Terminal),
        (sleap, WindowBucket::Subject),
        (0, WindowBucket::Other),
    ] {
        set_active(&x.display, id);
        assert_eq!(sampler.bucket(), bucket, "window {id:#x}");
    }

    // The agent: the focused window's bucket time grows, the others' does not.
    let agent = SessionAgent::builder()
        .with_interval(Duration::from_millis(20))
        .with_window_sampler(X11Window::default().with_display(x.display.clone()))
        .with_process_sampler(ProcScanner::new(Vec::new()))
        .with_gpu_sampler(NoGpu)
        .start(&opentelemetry::global::meter("test"))
        .unwrap();
    set_active(&x.display, firefox);
    wait_until("browser time grows", || {
        agent.counters().seconds_in_browser > 0.0
    });
    set_active(&x.display, terminal);
    let browser = {
        // The first tick after the switch may still have read the old window.
        let seen = agent.counters().sample_count;
        wait_until("two ticks", || agent.counters().sample_count >= seen + 2);
        agent.counters().seconds_in_browser
    };
    wait_until("terminal time grows", || {
        agent.counters().seconds_in_terminal > 0.0
    });
    let seen = agent.counters().sample_count;
    wait_until("two more ticks", || {
        agent.counters().sample_count >= seen + 2
    });
    assert_eq!(agent.counters().seconds_in_browser, browser);
    set_active(&x.display, sleap);
    wait_until("subject time grows", || {
        agent.counters().seconds_in_subject_software > 0.0
    });
    drop(agent);

    // The server goes away: other, and the sampler carries on.
    drop(conn);
    drop(x);
    assert_eq!(sampler.bucket(), WindowBucket::Other);
    assert_eq!(sampler.bucket(), WindowBucket::Other);
}

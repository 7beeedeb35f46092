//! The samplers against real parts: child processes under /proc, a training log that
//! grows on disk, and the agent's tick thread reading them.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use higgsmeter_session::{
    NoGpu, ProcScanner, ProcessRule, ProcessSampler, SessionAgent, TrainingLogFollower,
    TrainingProgress, TrainingSampler, WindowBucket, WindowSampler,
};
use higgsmeter_testkit::wait_until;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hm-session-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Kills and reaps a child when dropped, so a failed assertion leaves nothing behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sleep 60` started as an executable called `name` (its `comm` is `name`).
fn sleep_named(dir: &std::path::Path, name: &str) -> Reaped {
    let exe = dir.join(name);
    std::fs::copy("/bin/sleep", &exe).unwrap();
    Reaped(Command::new(&exe).arg("60").spawn().unwrap())
}

fn seen(scanner: &mut ProcScanner) -> Vec<String> {
    let mut out = Vec::new();
    scanner.processes_seen(&mut out);
    out
}

#[test]
fn the_proc_scanner_sees_real_processes_by_name_argv0_and_command_line() {
    let _sleap = crate::support::sleap_processes();
    let dir = temp_dir("procs");
    let mut scanner = ProcScanner::default();
    // By name (comm).
    let _train = sleep_named(&dir, "sleap-train");
    // By argv[0] (comm stays `sleep`).
    let _label = Reaped(
        Command::new("/bin/sleep")
            .arg0("/opt/sleap/bin/sleap-label")
            .arg("60")
            .spawn()
            .unwrap(),
    );
    // By the module on its command line.
    let _track = Reaped(
        Command::new("/bin/sh")
            .args([
                "-c",
                "sleep 60; :",
                "python3",
                "-m",
                "sleap.nn.inference",
                "x.slp",
            ])
            .spawn()
            .unwrap(),
    );
    wait_until("the three SLEAP processes are seen", || {
        seen(&mut scanner) == ["sleap-label", "sleap-track", "sleap-train"]
    });
}

#[test]
fn a_process_is_seen_while_it_runs_and_not_after() {
    let dir = temp_dir("procs-gone");
    let name = format!("hm-w{}", std::process::id() % 100_000);
    let mut scanner = ProcScanner::new(vec![
        ProcessRule::new(name.clone(), None),
        ProcessRule::new("hm-never-started", Some("hm-no-such-pattern-7f3a")),
    ]);
    assert!(seen(&mut scanner).is_empty());
    let child = sleep_named(&dir, &name);
    wait_until("the child is seen", || seen(&mut scanner) == [name.clone()]);
    drop(child);
    assert!(seen(&mut scanner).is_empty());
}

fn append(path: &std::path::Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn the_training_log_follower_reads_rows_as_they_are_appended() {
    let dir = temp_dir("csv");
    let path = dir.join("training_log.csv");
    let mut follower = TrainingLogFollower::new(&path);
    // Not there yet.
    assert_eq!(follower.read().epochs_completed, None);
    append(&path, "epoch,loss,lr,val_loss\n");
    assert_eq!(follower.read().epochs_completed, None);
    append(&path, "0,0.5,0.001,0.6\n");
    let r = follower.read();
    assert_eq!((r.epochs_completed, r.loss), (Some(1), Some(0.5)));
    // Half a row is not read until its newline arrives.
    append(&path, "1,0.25");
    assert_eq!(follower.read().epochs_completed, Some(1));
    append(&path, "0,0.001,0.3\n");
    let r = follower.read();
    assert_eq!((r.epochs_completed, r.loss), (Some(2), Some(0.250)));
    // nan losses and rows that do not parse change nothing.
    append(&path, "2,nan,0.001,nan\nthree,x,y,z\n");
    let r = follower.read();
    assert_eq!((r.epochs_completed, r.loss), (Some(3), Some(0.25)));
    // A new run replaces the file: read again from its header; the maximum stays.
    std::fs::remove_file(&path).unwrap();
    append(&path, "epoch,loss\n0,0.9\n");
    let r = follower.read();
    assert_eq!((r.epochs_completed, r.loss), (Some(3), Some(0.9)));
}

#[test]
fn a_follower_with_other_columns_and_base_one() {
    let dir = temp_dir("csv-cols");
    let path = dir.join("log.csv");
    append(
        &path,
        "\"step\",\"val_loss\",\"loss\"\n1,0.7,0.8\n2,0.6,0.75\n",
    );
    let mut follower = TrainingLogFollower::new(&path)
        .with_epoch_column("step")
        .with_loss_column("val_loss")
        .with_epoch_base(1);
    let r = follower.read();
    assert_eq!((r.epochs_completed, r.loss), (Some(2), Some(0.6)));
}

struct Fixed(WindowBucket);

impl WindowSampler for Fixed {
    fn bucket(&mut self) -> WindowBucket {
        self.0
    }
}

#[test]
fn the_agent_ticks_the_samplers_into_the_counters() {
    let dir = temp_dir("agent");
    let path = dir.join("training_log.csv");
    let name = format!("hm-a{}", std::process::id() % 100_000);
    let progress = TrainingProgress::new();
    let agent = SessionAgent::builder()
        .with_interval(Duration::from_millis(20))
        .with_window_sampler(Fixed(WindowBucket::Browser))
        .with_process_sampler(ProcScanner::new(vec![ProcessRule::new(name.clone(), None)]))
        .with_gpu_sampler(NoGpu)
        .with_training_sampler(TrainingLogFollower::new(&path))
        .with_training_sampler(progress.clone())
        .start(&opentelemetry::global::meter("test"))
        .unwrap();
    wait_until("three ticks", || agent.counters().sample_count >= 3);
    let c = agent.counters();
    assert!(c.seconds_in_browser > 0.0);
    assert_eq!(
        c.seconds_in_subject_software + c.seconds_in_terminal + c.seconds_in_other,
        0.0
    );
    assert_eq!(c.gpu_active_seconds, 0.0);

    append(&path, "epoch,loss\n0,0.5\n1,0.4\n2,0.3\n");
    wait_until("the log's epochs reach the counters", || {
        agent.counters().training_epochs_completed == 3
    });
    progress.record_labeled_frames(250);
    progress.record_loss(0.125);
    wait_until("the API's values reach the counters", || {
        let c = agent.counters();
        c.max_labeled_frames == 250 && c.training_final_loss == Some(0.125)
    });
    // A lower epoch count from the API does not lower the counters.
    progress.record_epochs_completed(1);
    let before = agent.counters().sample_count;
    wait_until("two more ticks", || {
        agent.counters().sample_count >= before + 2
    });
    assert_eq!(agent.counters().training_epochs_completed, 3);
    let handle = agent.handle();
    agent.stop();
    let stopped = handle.counters();
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(handle.counters(), stopped, "no tick after stop");
}

//! Every shell command in README.md and in the examples' docs runs as written: each one
//! is either run here, bounded (it stops on its own, or the test fails after
//! [`LIMIT`]), or listed in [`NOT_RUN`] with the reason. A command that is neither fails
//! the test, so a new command in the docs is run or explained.
//!
//! `cargo run -p higgsmeter-examples --bin NAME` runs this package's binary NAME (built
//! for this test, the same code); a command that pushes to a collector on the default
//! ports (`127.0.0.1:4317` / `:4318`) pushes to one started for it on free ports instead,
//! and the test checks that the command's `RANK` reached it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use higgsmeter_collector::View;
use higgsmeter_testkit::collector::InProcess;
use higgsmeter_testkit::repo_root;

/// The longest any one command may run.
const LIMIT: Duration = Duration::from_secs(120);

/// Commands the test does not run, exactly as the docs write them, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "cargo run --release -p higgsmeter-examples --bin demo",
        "runs until ctrl-c; the bounded form (--duration) is run",
    ),
    (
        "bash .ci/setup && cargo test --workspace && .venv/bin/python -m pytest sdk/python -q",
        "installs packages as root and runs every test (about 6 minutes of cargo test from a fresh clone): what CI runs",
    ),
    (
        "pip uninstall -y higgsmeter && pip install higgsmeter-0.2.0-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "changes the Python environment it runs in (.ci/setup builds this wheel with sdk/python/build-wheel.sh and installs it into .venv with no Rust toolchain on PATH)",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://tempo:4317 OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.1 RANK=3 WORLD_SIZE=8 ./my-worker",
        "`./my-worker` is the reader's own program and `tempo` their trace backend",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 torchrun --nproc-per-node 3 examples/python/ddp_train.py",
        "needs PyTorch, which the test command does not install (gigabytes); the next command, its stand-in without PyTorch, is run",
    ),
    (
        "cargo run --release -p higgsmeter-session -- run --push-url http://allocator:8000/sessions/42/counters --training-log models/run1/training_log.csv",
        "runs until SIGTERM and pushes to the lab's allocator (sdk/session/tests/it/run.rs runs it against a local one)",
    ),
    (
        "cargo run --release -p higgsmeter-session -- replay --session-started-at 2025-03-01T09:00:00+00:00 --samples sdk/session/tests/fixtures/samples.jsonl",
        "sdk/session/tests/it/parity.rs runs this replay of this fixture and checks its output",
    ),
];

/// One command of the docs: where it is written, and its text (continuation lines
/// joined, the trailing comment removed).
#[derive(Debug)]
struct DocCommand {
    at: String,
    text: String,
}

/// The text before an unquoted ` #` comment, trimmed.
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || bytes[i - 1].is_ascii_whitespace()) => {
                return line[..i].trim();
            }
            _ => {}
        }
    }
    line.trim()
}

/// Commands of one block of lines (`\` continues a line; comments and blanks skipped).
fn block_commands(at: &str, first_line: usize, lines: &[&str], out: &mut Vec<DocCommand>) {
    let mut current = String::new();
    let mut start = first_line;
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if current.is_empty() {
            start = first_line + i;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head.trim());
            current.push(' ');
            continue;
        }
        current.push_str(strip_comment(line));
        let text = current.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() {
            out.push(DocCommand {
                at: format!("{at}:{start}"),
                text,
            });
        }
        current.clear();
    }
}

/// The shell blocks of a Markdown file (```sh, ```bash, ```shell, ```console).
fn markdown_commands(path: &str, out: &mut Vec<DocCommand>) {
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        let shell = ["```sh", "```bash", "```shell", "```console"]
            .iter()
            .any(|f| fence.strip_prefix(f).is_some_and(|r| r.trim().is_empty()));
        if shell {
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim_start().starts_with("```"))
                .unwrap_or(lines.len());
            block_commands(path, i + 2, &lines[i + 1..end], out);
            i = end;
        }
        i += 1;
    }
}

/// The ```text blocks of a Rust file's `//!` docs.
fn rust_doc_commands(path: &str, out: &mut Vec<DocCommand>) {
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    let docs: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| l.strip_prefix("//!").map(|d| (i + 1, d.trim_start())))
        .collect();
    let mut i = 0;
    while i < docs.len() {
        if docs[i].1.trim() == "```text" {
            let end = (i + 1..docs.len())
                .find(|&j| docs[j].1.starts_with("```"))
                .unwrap_or(docs.len());
            let lines: Vec<&str> = docs[i + 1..end].iter().map(|(_, l)| *l).collect();
            block_commands(path, docs[i].0 + 1, &lines, out);
            i = end;
        }
        i += 1;
    }
}

/// The commands of a Python file's module docstring: its lines indented by 4 spaces.
fn python_doc_commands(path: &str, out: &mut Vec<DocCommand>) {
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    let body = text.split("\"\"\"").nth(1).unwrap_or("");
    for (i, line) in body.lines().enumerate() {
        if let Some(cmd) = line.strip_prefix("    ") {
            block_commands(path, i + 1, &[cmd], out);
        }
    }
}

fn doc_commands() -> Vec<DocCommand> {
    let mut out = Vec::new();
    markdown_commands("README.md", &mut out);
    markdown_commands("docs/testing.md", &mut out);
    markdown_commands("docs/guide.md", &mut out);
    markdown_commands("docs/python-guide.md", &mut out);
    rust_doc_commands("examples/src/bin/lifecycle_worker.rs", &mut out);
    rust_doc_commands("examples/src/bin/demo/main.rs", &mut out);
    for example in ["worker", "ddp_train", "serving_engine", "lab_session"] {
        python_doc_commands(&format!("examples/python/{example}.py"), &mut out);
    }
    out
}

/// What running a command takes: its environment assignments, the program and args.
fn split(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut env = Vec::new();
    let mut words = text.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        match w.split_once('=') {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_') =>
            {
                env.push((k.to_owned(), v.to_owned()));
                words.next();
            }
            _ => break,
        }
    }
    (env, words.map(str::to_owned).collect())
}

/// The program to run for `argv` (`cargo run -p higgsmeter-examples --bin NAME -- …`
/// is this package's binary NAME, `.venv/bin/python` the test venv's Python), and its
/// arguments; `None` when the test cannot.
fn program(argv: &[String]) -> Option<(PathBuf, Vec<String>)> {
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["cargo", "run", rest @ ..] => {
            let (opts, args) = match rest.iter().position(|w| *w == "--") {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &[][..]),
            };
            let opts: Vec<&str> = opts.iter().copied().filter(|w| *w != "--release").collect();
            let bin = match opts.as_slice() {
                ["-p", "higgsmeter-examples", "--bin", bin] => *bin,
                _ => return None,
            };
            let path = match bin {
                "demo" => env!("CARGO_BIN_EXE_demo"),
                "lifecycle-worker" => env!("CARGO_BIN_EXE_lifecycle-worker"),
                _ => return None,
            };
            Some((
                PathBuf::from(path),
                args.iter().map(|s| (*s).to_owned()).collect(),
            ))
        }
        // The test venv's Python (`$HIGGSMETER_PYTHON` stands for `.venv/bin/python`).
        [".venv/bin/python", args @ ..] => Some((
            higgsmeter_testkit::tools::python(),
            args.iter().map(|s| (*s).to_owned()).collect(),
        )),
        [python, args @ ..] if python.ends_with("bin/python") => {
            let path = repo_root().join(python);
            assert!(
                path.exists(),
                "{} is missing: run `bash .ci/setup` first",
                path.display()
            );
            Some((path, args.iter().map(|s| (*s).to_owned()).collect()))
        }
        _ => None,
    }
}

/// Runs `cmd` to its end (at most [`LIMIT`]); returns its stdout. A command that
/// pushes OTLP gets a collector of its own, which must receive its `RANK`'s data.
fn run(cmd: &DocCommand) -> String {
    let (env, argv) = split(&cmd.text);
    let pushes = env.iter().any(|(k, _)| k.starts_with("OTEL_EXPORTER_OTLP"));
    let collector = pushes.then(InProcess::start);
    let (path, args) = program(&argv).unwrap_or_else(|| {
        panic!(
            "{}: `{}` is neither run by this test nor listed in NOT_RUN with a reason",
            cmd.at, cmd.text
        )
    });
    let mut command = Command::new(&path);
    command.args(&args).current_dir(repo_root());
    // Only what the command says: none of this shell's OTLP or Prometheus settings.
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") || k.starts_with("HIGGSMETER_") || k == "RANK" {
            command.env_remove(k);
        }
    }
    for (k, v) in &env {
        match &collector {
            Some(c) => command.env(k, c.redirect(v)),
            None => command.env(k, v),
        };
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: start `{}`: {e}", cmd.at, cmd.text));
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{}: `{}` ran past {LIMIT:?}: a documented command must stop on its own or be listed in NOT_RUN",
                cmd.at, cmd.text
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}: `{}` failed ({}):\n{stdout}\n{}",
        cmd.at,
        cmd.text,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // A command that pushes to the collector: its rank's GPU time arrived (a rank that
    // does not track would show only "startup").
    if let (Some(collector), Some((_, rank))) = (&collector, env.iter().find(|(k, _)| k == "RANK"))
    {
        let sources = collector.running().aggregator().render(View::Sources);
        let want = format!("rank=\"{rank}\"");
        let gpu = sources.lines().any(|l| {
            l.starts_with("worker_activity_time_seconds_total{")
                && l.contains(&want)
                && l.contains("state=\"gpu\"")
                && l.rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|v| v > 0.0)
        });
        assert!(
            gpu,
            "{}: `{}`: no GPU time of {want} reached the collector:\n{sources}",
            cmd.at, cmd.text
        );
    }
    stdout
}

#[test]
fn every_documented_command_runs_or_says_why_not() {
    let commands = doc_commands();
    assert!(commands.len() >= 8, "found only {commands:#?}");
    for (text, why) in NOT_RUN {
        assert!(
            commands.iter().any(|c| c.text == *text),
            "NOT_RUN lists `{text}` ({why}), which no doc writes any more"
        );
    }
    let mut ran = Vec::new();
    for cmd in &commands {
        if NOT_RUN.iter().any(|(text, _)| *text == cmd.text) {
            continue;
        }
        let stdout = run(cmd);
        assert!(
            !stdout.trim().is_empty(),
            "{}: `{}` printed nothing",
            cmd.at,
            cmd.text
        );
        eprintln!("ran {}: {}", cmd.at, cmd.text);
        ran.push(cmd.at.clone());
    }
    assert!(ran.len() >= 5, "ran only {ran:?}");
}

#[test]
fn commands_are_read_as_a_shell_would() {
    assert_eq!(strip_comment("a b   # c"), "a b");
    assert_eq!(strip_comment("a 'x # y' # c"), "a 'x # y'");
    assert_eq!(strip_comment("a=http://x/#frag"), "a=http://x/#frag");
    let mut out = Vec::new();
    block_commands(
        "f",
        1,
        &["A=1 \\", "  run -x   # note", "", "# only a comment"],
        &mut out,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text, "A=1 run -x");
    let (env, argv) = split(&out[0].text);
    assert_eq!(env, [("A".to_owned(), "1".to_owned())]);
    assert_eq!(argv, ["run", "-x"]);
}

//! CPU time and memory of a process, from `/proc/PID/stat` and `/proc/PID/status`.

use std::time::Instant;

use anyhow::Context as _;

/// Clock ticks per second of the `utime`/`stime` fields in `/proc/PID/stat`. Linux
/// exports them in `USER_HZ`, which is 100 on every architecture it supports.
const USER_HZ: f64 = 100.0;

/// One reading of a process's CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    at: Instant,
    ticks: u64,
}

/// Busy CPU time of the whole machine (all cores), from `/proc/stat`.
pub(crate) fn machine() -> anyhow::Result<CpuSample> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let ticks = parse_machine_busy(&text).context("parsing /proc/stat")?;
    Ok(CpuSample {
        at: Instant::now(),
        ticks,
    })
}

/// user + nice + system + irq + softirq + steal of the aggregate `cpu` line.
fn parse_machine_busy(text: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no aggregate cpu line")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    Ok(get(0) + get(1) + get(2) + get(5) + get(6) + get(7))
}

/// Memory figures from `/proc/PID/status`, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    /// Resident set size now (`VmRSS`).
    pub(crate) rss_kib: u64,
    /// Peak resident set size since the process started (`VmHWM`).
    pub(crate) hwm_kib: u64,
}

/// Reads user + system CPU time of `pid` (all threads).
pub(crate) fn cpu(pid: u32) -> anyhow::Result<CpuSample> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: is process {pid} still running?"))?;
    let ticks = parse_stat_ticks(&text).with_context(|| format!("parsing {path}"))?;
    Ok(CpuSample {
        at: Instant::now(),
        ticks,
    })
}

/// CPU seconds used between two samples.
pub(crate) fn cpu_seconds(a: CpuSample, b: CpuSample) -> f64 {
    b.ticks.saturating_sub(a.ticks) as f64 / USER_HZ
}

/// Percent of one core used between two samples.
pub(crate) fn cpu_percent(a: CpuSample, b: CpuSample) -> f64 {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    b.ticks.saturating_sub(a.ticks) as f64 / USER_HZ / secs * 100.0
}

/// Reads `VmRSS` and `VmHWM` of `pid`.
pub(crate) fn memory(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: is process {pid} still running?"))?;
    Ok(parse_status(&text))
}

/// `utime + stime` (fields 14 and 15). The command name (field 2) may contain spaces
/// and parentheses, so fields are counted after its closing parenthesis.
fn parse_stat_ticks(text: &str) -> anyhow::Result<u64> {
    let rest = text
        .rfind(')')
        .and_then(|i| text.get(i + 1..))
        .context("no ')' after the command name")?;
    // After ')': field 3 (state) is index 0, so utime (14) is index 11, stime index 12.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next().context("no utime field")?.parse()?;
    let stime: u64 = fields.next().context("no stime field")?.parse()?;
    Ok(utime + stime)
}

fn parse_status(text: &str) -> Memory {
    let mut m = Memory::default();
    for line in text.lines() {
        let field = |prefix: &str| -> Option<u64> {
            line.strip_prefix(prefix)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        if let Some(v) = field("VmRSS:") {
            m.rss_kib = v;
        } else if let Some(v) = field("VmHWM:") {
            m.hwm_kib = v;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_name() {
        let line = "1234 (my (odd) cmd) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0 100 0 0";
        assert_eq!(parse_stat_ticks(line).unwrap(), 300);
    }

    #[test]
    fn parses_proc_stat() {
        let text = "cpu  10 1 5 100 7 2 3 4 0 0\ncpu0 5 0 2 50 3 1 1 2 0 0\n";
        assert_eq!(parse_machine_busy(text).unwrap(), 10 + 1 + 5 + 2 + 3 + 4);
    }

    #[test]
    fn parses_status() {
        let m = parse_status("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n");
        assert_eq!((m.rss_kib, m.hwm_kib), (1024, 2048));
    }

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        let a = cpu(pid).unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = cpu(pid).unwrap();
        assert!(cpu_percent(a, b) >= 0.0);
        assert!(memory(pid).unwrap().rss_kib > 0);
    }
}

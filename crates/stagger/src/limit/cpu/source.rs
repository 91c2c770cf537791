//! Where the CPU reading comes from: the process's cgroup (v2) when it has
//! one, `/proc/self/stat` otherwise. The parsers are pure functions of the
//! files' text; only [`Source`] reads files.

use std::path::PathBuf;
use std::time::Duration;

/// The clock ticks per second `/proc/<pid>/stat` counts in (`USER_HZ`):
/// 100 on every architecture Linux exports to user space.
const USER_HZ: u64 = 100;

/// `usage_usec` of a cgroup v2 `cpu.stat`: the CPU time the group's
/// tasks have used.
pub(crate) fn parse_cpu_stat(text: &str) -> Option<Duration> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == "usage_usec")
            .then(|| value.trim().parse().ok().map(Duration::from_micros))
            .flatten()
    })
}

/// The cores a cgroup v2 `cpu.max` allows (`$MAX $PERIOD`), or `None`
/// when it says `max` (no quota) or cannot be read.
pub(crate) fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota = parts.next()?;
    let period: f64 = parts.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0).then(|| quota / period)
}

/// `utime + stime` of a `/proc/<pid>/stat` line: the process's CPU time.
/// The command name (field 2) is in parentheses and may hold spaces and
/// parentheses itself, so fields are counted from the last `)`.
pub(crate) fn parse_proc_stat(text: &str) -> Option<Duration> {
    let rest = &text[text.rfind(')')? + 1..];
    // After the name: field 3 (state) is the first; utime is field 14.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime.checked_add(stime)?;
    Some(Duration::from_millis(ticks.checked_mul(1000 / USER_HZ)?))
}

/// The path of the process's cgroup v2 group in `/proc/self/cgroup` (the
/// `0::PATH` line), if it is in one.
pub(crate) fn parse_cgroup_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// A place to read the process's CPU time from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A cgroup v2 group's `cpu.stat`, with the cores its `cpu.max` allows.
    Cgroup { stat: PathBuf, cores: Option<f64> },
    /// `/proc/self/stat`.
    Proc,
}

impl Source {
    /// The process's cgroup when it has a readable `cpu.stat`, else
    /// `/proc/self/stat` when that is readable.
    pub(crate) fn detect() -> Option<Source> {
        if let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") {
            if let Some(path) = parse_cgroup_path(&text) {
                let dir = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
                let stat = dir.join("cpu.stat");
                if std::fs::read_to_string(&stat)
                    .ok()
                    .as_deref()
                    .and_then(parse_cpu_stat)
                    .is_some()
                {
                    let cores = std::fs::read_to_string(dir.join("cpu.max"))
                        .ok()
                        .as_deref()
                        .and_then(parse_cpu_max);
                    return Some(Source::Cgroup { stat, cores });
                }
            }
        }
        Source::Proc.usage().map(|_| Source::Proc)
    }

    /// CPU time used so far.
    pub(crate) fn usage(&self) -> Option<Duration> {
        match self {
            Source::Cgroup { stat, .. } => parse_cpu_stat(&std::fs::read_to_string(stat).ok()?),
            Source::Proc => parse_proc_stat(&std::fs::read_to_string("/proc/self/stat").ok()?),
        }
    }

    /// The cores the process may use: the cgroup's quota, else the
    /// parallelism the system grants it.
    pub(crate) fn cores(&self) -> f64 {
        let granted = || std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        match self {
            Source::Cgroup { cores: Some(c), .. } => *c,
            _ => granted(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cpu.stat` as the kernel's cgroup v2 documentation
    /// (Documentation/admin-guide/cgroup-v2.rst, "CPU Interface Files")
    /// describes it: `usage_usec`, `user_usec` and `system_usec` always,
    /// the throttling and burst keys when the cpu controller is enabled.
    #[test]
    fn cpu_stat_is_read_from_its_usage_key() {
        let enabled = "usage_usec 2349120\nuser_usec 1741204\nsystem_usec 607916\n\
                       core_sched.force_idle_usec 0\nnr_periods 120\nnr_throttled 4\n\
                       throttled_usec 183210\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse_cpu_stat(enabled),
            Some(Duration::from_micros(2_349_120))
        );
        let plain = "usage_usec 17\nuser_usec 10\nsystem_usec 7\n";
        assert_eq!(parse_cpu_stat(plain), Some(Duration::from_micros(17)));
        // The key must be whole: `nr_usage_usec` is not it.
        assert_eq!(parse_cpu_stat("nr_usage_usec 5\n"), None);
        assert_eq!(parse_cpu_stat("usage_usec lots\n"), None);
        assert_eq!(parse_cpu_stat(""), None);
    }

    /// `cpu.max` is `$MAX $PERIOD`, `max` meaning no limit; the default is
    /// `max 100000` (the same kernel document).
    #[test]
    fn cpu_max_gives_the_cores_a_quota_allows() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("50000 100000"), Some(0.5));
        assert_eq!(
            parse_cpu_max("200000"),
            Some(2.0),
            "the period may be left out"
        );
        for bad in ["", "x 100000", "100000 0", "0 100000", "-5 100000"] {
            assert_eq!(parse_cpu_max(bad), None, "{bad:?}");
        }
    }

    /// `/proc/[pid]/stat` as proc(5) gives it: `utime` is field 14 and
    /// `stime` field 15, in clock ticks; `comm` (field 2) is in
    /// parentheses and may contain spaces and `)`. The first line is this
    /// machine's own `cat /proc/self/stat`, copied as it was.
    #[test]
    fn proc_stat_sums_user_and_system_time_after_the_name() {
        let real = "15689 (cat) R 15680 15680 7963 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 32800 \
                    3133440 381 18446744073709551615 94448738557952 94448738577833 \
                    140725747266480 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94448738593840 \
                    94448738595456 94448839782400 140725747272210 140725747272230 \
                    140725747272230 140725747273707 0";
        assert_eq!(parse_proc_stat(real), Some(Duration::ZERO));
        let busy = "4242 (my server) S 1 4242 4242 0 -1 4194560 9263 0 0 0 1234 566 0 0 20 0 9 0 \
                    1770 2147483648 12000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0";
        assert_eq!(parse_proc_stat(busy), Some(Duration::from_millis(18_000)));
        let tricky = "7 (a) b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0";
        assert_eq!(parse_proc_stat(tricky), Some(Duration::from_millis(70)));
        for bad in [
            "",
            "12 (x R 1",
            "12 (x) R 1 2 3",
            "1 (x) R 1 1 1 0 -1 0 0 0 0 0 u s",
        ] {
            assert_eq!(parse_proc_stat(bad), None, "{bad:?}");
        }
    }

    /// `/proc/self/cgroup` has one `hierarchy-ID:controllers:path` line per
    /// hierarchy; the v2 one is `0::PATH` (cgroups(7)). A hybrid host (this
    /// machine's lines, as read) lists v1 hierarchies too.
    #[test]
    fn the_v2_group_is_the_zero_line() {
        let hybrid = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/6cf705f6906a7e91834d7db72cbd86d1\n1:cpu:/\n0::/\n";
        assert_eq!(parse_cgroup_path(hybrid), Some("/"));
        assert_eq!(
            parse_cgroup_path("0::/system.slice/shop.service\n"),
            Some("/system.slice/shop.service")
        );
        assert_eq!(parse_cgroup_path("4:memory:/x\n1:cpu:/\n"), None, "v1 only");
    }

    #[test]
    fn this_process_has_a_source_that_moves_with_work() {
        let Some(source) = Source::detect() else {
            return; // not Linux: nothing to read (the trigger says so at start)
        };
        let before = source.usage().expect("readable");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(150) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = source.usage().expect("readable");
        assert!(after > before, "{source:?}: {before:?} → {after:?}");
        assert!(source.cores() > 0.0);
    }
}

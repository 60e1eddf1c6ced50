//! The report's text: formatting, the run's facts (machine, versions, command), the goals table, and the
//! dated results file the run is kept in, listed at the end of `BENCHMARKS.md`.

use super::*;

// ---------------------------------------------------------------- output

/// The report: printed as it grows, kept for its results file.
pub struct Out {
    pub md: String,
    /// Each picture's path under `benchmarks/`, and its SVG.
    pub pictures: Vec<(String, String)>,
    /// The results file's name without `.md`: `<day>-<subject>`.
    pub stem: String,
}

impl Out {
    pub fn new(stem: String) -> Out {
        Out {
            md: String::new(),
            pictures: Vec::new(),
            stem,
        }
    }

    pub fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.md.push_str(s.as_ref());
        self.md.push('\n');
    }

    pub fn picture(&mut self, file: &str, alt: &str, svg: String) {
        let index = fs::read_to_string(index_path()).unwrap_or_default();
        let (path, link) = picture_place(&index, &self.stem, file);
        self.line(format!("![{alt}]({link})"));
        self.line("");
        self.pictures.push((path, svg));
    }
}

/// A latency in the unit that suits it.
pub fn lat(ns: u64) -> String {
    let ns = ns as f64;
    if ns < 100_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e6 {
        format!("{:.0} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

pub fn q(h: &hdrhistogram::Histogram<u64>, quantile: f64) -> String {
    if h.is_empty() {
        "—".into()
    } else {
        lat(h.value_at_quantile(quantile))
    }
}

pub fn p50(h: &hdrhistogram::Histogram<u64>) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(0.5) as f64)
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

pub fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------- the run's facts

pub fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// `name version` of the peers, from `Cargo.lock`.
pub fn versions() -> String {
    let lock = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
        .unwrap_or_default();
    // Every version of `name` in the lock file (the peers bring older redis-rs versions of their own).
    let version = |name: &str| {
        let needle = format!("name = \"{name}\"\nversion = \"");
        let all: Vec<&str> = lock
            .match_indices(&needle)
            .filter_map(|(i, _)| lock[i + needle.len()..].split('"').next())
            .collect();
        if all.is_empty() {
            "?".to_string()
        } else {
            all.join(" and ")
        }
    };
    format!(
        "muxlock {} (this tree), redlock {}, rslock {}, redis-rs {} (the hand-written clients use 1.x; rslock and redlock bring their own), tokio {}",
        env!("CARGO_PKG_VERSION"),
        version("redlock"),
        version("rslock"),
        version("redis"),
        version("tokio")
    )
}

/// The three load averages.
pub fn load3() -> String {
    loadavg()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

pub fn header(out: &mut Out, plan: &Plan) {
    let redis = env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let rev = command_line(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ],
    );
    let command = env::var("MUXLOCK_REPORT_COMMAND").unwrap_or_else(|_| {
        format!(
            "cargo bench --bench report{}",
            if plan.mode == Mode::Quick {
                " -- --quick"
            } else {
                ""
            }
        )
    });
    out.line("## Against other clients (`scripts/bench-report`)\n");
    out.line("*Written by `scripts/bench-report` (`benches/report.rs`); a rerun the same day replaces this file.*\n");
    if plan.mode == Mode::Quick {
        out.line("**QUICK RUN (`--quick`): short, few samples, noisy. Indicative only; the full run is the one to \
                  quote.**\n");
    }
    out.line(format!(
        "- **Run**: {} UTC, `{command}`, source `{rev}`.",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M"])
    ));
    out.line(format!(
        "- **Machine**: {} vCPUs, {}, Linux {}; load average at the start {}. The 5-node servers, the clients and \
         (often) other people's builds share these vCPUs: compare ratios within this run, not absolute times \
         across runs.",
        thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        command_line("uname", &["-r"]),
        load3()
    ));
    out.line(format!(
        "- **Versions**: {}; {}; {}.",
        versions(),
        command_line(&redis, &["--version"]),
        command_line("rustc", &["--version"])
    ));
    out.line(
        "- **Clients**: `muxlock` (`LockManager`, one attempt per call, restart guard off: the nodes have just \
         started); `rslock` (one attempt per call, a current-thread runtime with `block_on` per call, or N tasks on \
         a multi-thread runtime for throughput); `redlock` (the crate, one attempt per call); `redis-rs/quorum` \
         (Redlock by hand on one redis-rs multiplexed connection per node, an answer at the majority: \
         `benches/peers/quorum.rs`); `redis-rs/single` (no Redlock: `SET NX PX` and the release script on one node, \
         redis-rs sync connection). TTL 30 s; every node a local `redis-server` started by the bench on a free \
         port.\n",
    );
}

// ---------------------------------------------------------------- the results file

/// `BENCHMARKS.md`: the current figures, and the list of every run's results file at its end.
fn index_path() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../BENCHMARKS.md").to_string()
}

/// Today's date (UTC) from the system clock, `YYYY-MM-DD`: the results file's name starts with it.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    day_of(secs / 86_400)
}

/// The civil date `days` after 1970-01-01 (the proleptic Gregorian calendar, as `date -u` prints it).
fn day_of(days: u64) -> String {
    // Howard Hinnant's `civil_from_days`, in 400-year eras counted from 0000-03-01, so a leap day ends its year.
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Where a picture goes, under `benchmarks/`, and the link to it from the results file: where `BENCHMARKS.md`
/// (`index`) shows it, `benchmarks/<file>`, so the page shows this run's; else next to the results file, named
/// after it so that a later run does not redraw an earlier run's picture.
fn picture_place(index: &str, stem: &str, file: &str) -> (String, String) {
    if index.contains(&format!("(benchmarks/{file})")) {
        (file.to_string(), format!("../{file}"))
    } else {
        let own = format!("{stem}-{file}");
        (format!("results/{own}"), own)
    }
}

/// Writes the run to `benchmarks/results/<stem>.md` (a rerun the same day replaces it) and its pictures (see
/// [`picture_place`]), and lists the file at the end of `BENCHMARKS.md` unless it is listed already.
pub fn write_files(out: &Out, what: &str) -> Result<(), String> {
    let bench = concat!(env!("CARGO_MANIFEST_DIR"), "/../benchmarks");
    let index_path = index_path();
    let index = fs::read_to_string(&index_path).map_err(|e| format!("{index_path}: {e}"))?;
    let name = format!("{}.md", out.stem);
    // Checked before anything is written: a page without its list of runs gets no orphan file.
    let listed = list_run(&index, &name, what).map_err(|e| format!("{index_path}: {e}"))?;
    let results = format!("{bench}/results");
    fs::create_dir_all(&results).map_err(|e| format!("{results}: {e}"))?;
    let path = format!("{results}/{name}");
    fs::write(&path, &out.md).map_err(|e| format!("{path}: {e}"))?;
    for (file, svg) in &out.pictures {
        let picture = format!("{bench}/{file}");
        fs::write(&picture, svg).map_err(|e| format!("{picture}: {e}"))?;
    }
    if listed != index {
        fs::write(&index_path, listed).map_err(|e| format!("{index_path}: {e}"))?;
    }
    println!(
        "\nwrote {path} and {} picture(s) under {bench}, listed at the end of BENCHMARKS.md; the table at its top \
         is written by hand: update its row if this run's figures are the new current ones",
        out.pictures.len()
    );
    Ok(())
}

/// `index` (`BENCHMARKS.md`) with a line linking `benchmarks/results/<name>` added after the last line of its
/// list of runs (`- [...](benchmarks/results/...)`), unless a line links that file already: a rerun the same day
/// lists its file once. A new file is named after today, so adding it last keeps the list in date order.
pub fn list_run(index: &str, name: &str, what: &str) -> Result<String, String> {
    let target = format!("](benchmarks/results/{name})");
    let mut lines: Vec<&str> = index.lines().collect();
    if lines.iter().any(|l| l.contains(&target)) {
        return Ok(index.to_string());
    }
    let is_run = |l: &&str| l.starts_with("- [") && l.contains("](benchmarks/results/");
    let Some(last) = lines.iter().rposition(is_run) else {
        return Err(
            "no list of runs (`- [...](benchmarks/results/...)` lines) to add this run to".into(),
        );
    };
    let entry = format!("- [{name}{target}: {what}");
    lines.insert(last + 1, &entry);
    let mut text = lines.join("\n");
    if index.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// The writer's own check, run by `cargo test --benches` (test mode): the date from the clock, where pictures go,
/// and a run listed once, after the last run, however often it is written.
pub fn check_results_file() {
    assert_eq!(day_of(0), "1970-01-01");
    assert_eq!(day_of(11_016), "2000-02-29");
    assert_eq!(day_of(20_789), "2026-12-02");
    assert_eq!(today().len(), 10);

    let index = "# Benchmarks\n\n![cdf](benchmarks/latency-cdf-5.svg)\n\n## Every run\n\n\
                 - [a.md](benchmarks/results/a.md): first\n- [b.md](benchmarks/results/b.md): second\n";
    let place = |file| picture_place(index, "2026-12-02-x", file);
    assert_eq!(
        place("latency-cdf-5.svg"),
        ("latency-cdf-5.svg".into(), "../latency-cdf-5.svg".into())
    );
    assert_eq!(
        place("cross-process.svg"),
        (
            "results/2026-12-02-x-cross-process.svg".into(),
            "2026-12-02-x-cross-process.svg".into()
        )
    );

    let once = list_run(index, "c.md", "third").expect("a list of runs");
    assert_eq!(
        once,
        format!("{index}- [c.md](benchmarks/results/c.md): third\n")
    );
    assert_eq!(
        list_run(&once, "c.md", "third, again").expect("a list of runs"),
        once,
        "a rerun lists its file once"
    );
    let trailing = format!("{index}\nWritten by hand.\n");
    let listed = list_run(&trailing, "c.md", "third").expect("a list of runs");
    assert!(
        listed.contains("second\n- [c.md](benchmarks/results/c.md): third\n\nWritten by hand.\n")
    );
    assert!(list_run("# Benchmarks\n", "c.md", "third").is_err());
}

/// The project's performance targets that this run measures, with verdicts: a miss is written as a miss.
pub fn goals(
    out: &mut Out,
    plan: &Plan,
    rows: &[throughput::report::Row],
    fault: &[Case],
    contention: &Contention,
    elapsed: Duration,
) {
    use throughput::Client as C;
    let mut lines: Vec<(String, String, String, Option<bool>)> = Vec::new();
    let limit = if plan.mode == Mode::Full {
        1200.0
    } else {
        120.0
    };
    lines.push((
        format!("the run's time, {:?} mode, build excluded", plan.mode),
        format!("{:.0} s", elapsed.as_secs_f64()),
        format!("< {limit:.0} s"),
        Some(elapsed.as_secs_f64() < limit),
    ));
    let median = |t: usize, c: C| {
        rows.iter()
            .find(|r| r.threads == t && r.client == c)
            .map(throughput::report::Row::median)
    };
    for (t, peer, goal) in [
        (16, C::Rslock, 3.0),
        (16, C::Quorum, 2.0),
        (64, C::Quorum, 2.0),
    ] {
        let v = median(t, C::Shared)
            .zip(median(t, peer))
            .map(|(a, b)| a / b);
        lines.push((
            format!("{t} threads: muxlock/shared ÷ {}", peer.name()),
            v.map_or("—".into(), |v| format!("{v:.2}")),
            format!("≥ {goal}"),
            v.map(|v| v >= goal),
        ));
    }
    let failed: u64 = rows
        .iter()
        .filter(|r| r.client.is_muxlock())
        .map(throughput::report::Row::failures)
        .sum();
    lines.push((
        "muxlock failed calls, throughput on healthy nodes".into(),
        failed.to_string(),
        "0".into(),
        Some(failed == 0),
    ));
    for c in fault.iter().filter(|c| c.kind == Kind::Muxlock) {
        let s = &c.stats;
        lines.push((
            format!("{}: muxlock calls that succeeded", c.label),
            format!("{} of {}", s.ok, s.calls()),
            "all, none blocked".into(),
            Some(s.failed == 0 && !s.blocked && s.ok > 0),
        ));
    }
    for (name, r) in contention
        .handoff
        .iter()
        .filter(|(n, _)| n.starts_with("muxlock"))
    {
        lines.push((
            format!("hand-off p50 ÷ uncontended acquire, {name}"),
            format!("{r:.2}"),
            "< 3".into(),
            r.is_finite().then_some(*r < 3.0),
        ));
    }
    for (name, s, r) in contention
        .fairness
        .iter()
        .filter(|(n, ..)| n.starts_with("muxlock"))
    {
        lines.push((
            format!("fairness, least ÷ most served, {name}"),
            format!("{r:.2}"),
            "≥ 0.5".into(),
            Some(*r >= 0.5 && s.failed == 0 && !s.blocked),
        ));
    }
    out.line("### Goals\n");
    out.line(format!(
        "The project's targets, measured in this run{}.\n",
        if plan.mode == Mode::Quick {
            " (a quick run: too few samples to settle a verdict)"
        } else {
            ""
        }
    ));
    out.line("| what | this run | goal | verdict |");
    out.line("|---|---:|---|---|");
    for (what, value, goal, ok) in lines {
        let verdict = match ok {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured",
        };
        out.line(format!("| {what} | {value} | {goal} | {verdict} |"));
    }
    out.line("");
}

//! The conventions a shell user brings from flock(1), timeout(1) and the like: `exec RESOURCE COMMAND...` without
//! `--`, bare numbers of seconds for waits, `-h` short and `--help` long, the environment variables named in the
//! help without their values, usage lines true whatever the environment sets, and the reference's tables
//! rendering as tables.

use crate::support;

use std::time::Duration;

use support::{Cluster, Muxlock, TempDir, on};

#[test]
fn exec_takes_the_command_after_the_resource_without_a_separator() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    // From the command's first word on, every word is the command's: muxlock's own option names and `--`
    // included.
    let run = on(
        &cluster,
        state.path(),
        &[
            "exec", "--ttl", "5s", "job", "printf", "%s|", "--ttl", "-n", "--", "x",
        ],
    )
    .run();
    run.expect(0);
    assert_eq!(run.stdout, "--ttl|-n|--|x|", "{run:#?}");
    // The command runs under the lock: it sees its resource, and the key holds its value meanwhile.
    let script = "printf '%s %s' \"$MUXLOCK_RESOURCE\" \"$MUXLOCK_VALUE\"";
    let run = on(&cluster, state.path(), &["exec", "job", "sh", "-c", script]).run();
    run.expect(0);
    let (resource, value) = run.stdout.split_once(' ').expect("two words");
    assert_eq!(resource, "job", "{run:#?}");
    assert_eq!(value.len(), 40, "{run:#?}");
    // muxlock's options may still come after the resource, before the command; `--` still works.
    on(
        &cluster,
        state.path(),
        &["exec", "job", "-n", "--ttl", "5s", "--", "true"],
    )
    .run()
    .expect(0);
    on(&cluster, state.path(), &["exec", "job", "true"])
        .run()
        .expect(0);
}

#[test]
fn exec_refuses_an_unknown_option_where_the_command_starts_and_says_to_add_the_separator() {
    let state = TempDir::new();
    // A mistyped option of muxlock is not run as a program: the refusal says how to run a command named so.
    let run = Muxlock::new(state.path(), ["exec", "job", "--tll", "5s", "./report"])
        .env("MUXLOCK_NODES", "127.0.0.1:1")
        .run();
    run.expect(64);
    assert!(run.stderr.contains("'-- --tll'"), "{run:#?}");
    let run = Muxlock::new(state.path(), ["exec", "job"])
        .env("MUXLOCK_NODES", "127.0.0.1:1")
        .run();
    run.expect(64);
    assert!(run.stderr.contains("<COMMAND>"), "{run:#?}");
}

#[test]
fn bare_numbers_for_waits_are_seconds_as_in_flock() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    on(&cluster, state.path(), &["acquire", "job", "--ttl", "30s"])
        .run()
        .expect(0);
    for (wait, at_least) in [
        ("1", Duration::from_secs(1)),
        ("0.5", Duration::from_millis(500)),
        ("700ms", Duration::from_millis(700)),
    ] {
        let run = on(
            &cluster,
            state.path(),
            &["acquire", "job", "--ttl", "10s", "-w", wait],
        )
        .run();
        run.expect(1);
        // A whole --ttl of 30 s later at the most: the holder's lease is not what ended the wait.
        assert!(
            run.took >= at_least && run.took < Duration::from_secs(20),
            "-w {wait}: {run:#?}"
        );
    }
    // The other waits and timeouts of flock(1) and timeout(1) read bare numbers the same way.
    on(
        &cluster,
        state.path(),
        &[
            "exec",
            "--wait",
            "0.2",
            "--outage-wait",
            "2",
            "--kill-after",
            "5",
            "job",
            "true",
        ],
    )
    .run()
    .expect(1);
    // A lease still needs its unit: a bare number there is refused.
    let run = on(&cluster, state.path(), &["acquire", "job", "--ttl", "30"]).run();
    run.expect(64);
    assert!(run.stderr.contains("write 30s"), "{run:#?}");
}

/// `muxlock ARGS` with no nodes configured.
fn help(args: &[&str]) -> String {
    let state = TempDir::new();
    let run = Muxlock::new(state.path(), args).run();
    run.expect(0);
    run.stdout.clone()
}

/// Every subcommand, as words.
const SUBCOMMANDS: [&[&str]; 12] = [
    &[],
    &["exec"],
    &["acquire"],
    &["release"],
    &["extend"],
    &["status"],
    &["cluster"],
    &["cluster", "up"],
    &["cluster", "down"],
    &["cluster", "status"],
    &["bench"],
    &["demo"],
];

#[test]
fn short_help_gives_one_line_per_option_and_long_help_the_reference() {
    for words in SUBCOMMANDS {
        let short = help(&[words, &["-h"]].concat());
        let long = help(&[words, &["--help"]].concat());
        let mut section = "";
        for line in short.lines() {
            if !line.starts_with(' ') {
                section = line;
            } else if matches!(section, "Options:" | "Arguments:" | "Commands:") {
                // An entry starts with its option, argument or command; a wrapped one goes on with a deeper
                // indent.
                let indent = line.len() - line.trim_start().len();
                let entry = match section {
                    "Commands:" => indent == 2,
                    _ => line.trim_start().starts_with(['-', '<']),
                };
                assert!(
                    entry,
                    "{words:?} -h: {line:?} is more than one line per entry:\n{short}"
                );
            }
        }
        assert!(
            short.lines().count() <= 30,
            "{words:?} -h has {} lines:\n{short}",
            short.lines().count()
        );
        // A command with more to say says where: the short help points at the long one.
        if long != short {
            assert!(short.contains("--help"), "{words:?} -h:\n{short}");
        }
        assert!(long.len() >= short.len(), "{words:?}:\n{short}\n{long}");
    }
    // The reference is in --help, not -h.
    let (short, long) = (help(&["-h"]), help(&["--help"]));
    for reference in ["Exit codes:", "Environment:", "MUXLOCK_PASSWORD"] {
        assert!(long.contains(reference), "{reference}:\n{long}");
        assert!(!short.contains(reference), "{reference}:\n{short}");
    }
    let exec = help(&["exec", "--help"]);
    for documented in [
        "MUXLOCK_DEADLINE_MS",
        "--kill-after",
        "SIGKILL",
        "Exit codes",
    ] {
        assert!(exec.contains(documented), "{documented}:\n{exec}");
    }
}

#[test]
fn the_help_names_each_variable_without_its_value() {
    let state = TempDir::new();
    let variables = [
        ("MUXLOCK_NODES", "redis://:hunter2@10.9.8.7:6379"),
        ("MUXLOCK_ROUND_TIMEOUT", "321ms"),
        ("MUXLOCK_RESTART_GUARD", "off"),
        ("MUXLOCK_RESTART_WINDOW", "17m"),
        ("MUXLOCK_TLS_CA", "/etc/secret-ca.pem"),
        ("MUXLOCK_TLS_CERT", "/etc/secret-cert.pem"),
        ("MUXLOCK_TLS_KEY", "/etc/secret-key.pem"),
    ];
    for set in [false, true] {
        for words in [&["acquire"][..], &["exec"], &["status"], &["bench"]] {
            let mut muxlock = Muxlock::new(state.path(), [words, &["--help"]].concat());
            if set {
                for (name, value) in variables {
                    muxlock = muxlock.env(name, value);
                }
            }
            let run = muxlock.run();
            run.expect(0);
            // Wrapping may break a line anywhere between words.
            let text = run.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
            for (name, value) in variables {
                assert!(
                    text.contains(&format!("[env: {name}]")),
                    "{name}, set: {set}: {text}"
                );
                // Neither `[env: NAME=]` for an unset variable nor its value for a set one.
                assert!(!text.contains(&format!("{name}=")), "{name}= shown: {text}");
                if value.len() > 3 {
                    assert!(!text.contains(value), "{value} shown: {text}");
                }
            }
        }
    }
}

#[test]
fn usage_lines_do_not_show_options_the_environment_sets_as_required() {
    let state = TempDir::new();
    for (args, usage) in [
        (
            &["acquire", "job"][..],
            "Usage: muxlock acquire [OPTIONS] --ttl <DUR> <RESOURCE>",
        ),
        (
            &["exec", "job"],
            "Usage: muxlock exec [OPTIONS] <RESOURCE> <COMMAND>...",
        ),
        (
            &["release", "job"],
            "Usage: muxlock release [OPTIONS] <RESOURCE> <VALUE>",
        ),
    ] {
        let run = Muxlock::new(state.path(), args)
            .env("MUXLOCK_NODES", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
            .env("MUXLOCK_ROUND_TIMEOUT", "1s")
            .env("MUXLOCK_RESTART_GUARD", "off")
            .run();
        run.expect(64);
        let line = run.stderr.lines().find(|l| l.starts_with("Usage:"));
        assert_eq!(line, Some(usage), "{run:#?}");
    }
}

#[test]
fn the_reference_tables_render_as_markdown_tables() {
    let readme = include_str!("../../README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let mut tables = 0;
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with('|') {
            i += 1;
            continue;
        }
        let start = i;
        while i < lines.len() && lines[i].starts_with('|') {
            i += 1;
        }
        let table = &lines[start..i];
        assert!(
            table.len() >= 3,
            "line {}: a table needs a header, a separator and rows: {table:#?}",
            start + 1
        );
        let separator = table[1].split('|').filter(|c| !c.is_empty()).all(|c| {
            !c.trim().is_empty() && c.trim().trim_matches(':').chars().all(|ch| ch == '-')
        });
        assert!(
            separator,
            "line {}: no separator line: {table:#?}",
            start + 2
        );
        // An unescaped `|` splits a cell even inside backticks.
        let cells = |row: &str| row.replace("\\|", "").matches('|').count();
        for (n, row) in table.iter().enumerate() {
            assert_eq!(
                cells(row),
                cells(table[0]),
                "line {}: not the header's cells: {row}",
                start + n + 1
            );
        }
        tables += 1;
    }
    assert!(tables >= 2, "{tables} tables");
}

//! The README's commands, run as a new user would run them, so that none can rot unseen.
//!
//! The commands are found by parsing `README.md`: the lines of its `sh` blocks, the `$ ` lines
//! of its `text` blocks (with the output shown under them), and the command column of its
//! "More commands" table. Each must be in [`PLANS`]: run here (the `patronus` binary cargo
//! built for this test stands in for `cargo run … -p patronus-cli --` and
//! `target/release/patronus`; the node listens on free ports, which stand in for the
//! documented 7471 and 9471), or skipped with the reason and the place that runs it instead.
//! A README command missing from the list fails the test, and so does a listed command the
//! README no longer has. Output the README shows is compared line by line, with addresses,
//! ports and hex values (roots, seeds) redacted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{EXE, Served};

/// What the test does with a README command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Run here.
    Run,
    /// Not run here, for this reason (naming what runs it instead, where something does).
    Skip(&'static str),
}

use Plan::{Run, Skip};

const BENCH_SMOKE: &str = "crates/bench/tests/bench_smoke.rs runs `patronus-bench all --quick` \
                           on both transports and checks every experiment's JSON, figure and \
                           report section (the bench binary belongs to another package)";

/// Every README command and what this test does with it.
const PLANS: &[(&str, Plan)] = &[
    (
        "cargo run --release -p patronus-bench -- all --quick",
        Skip(BENCH_SMOKE),
    ),
    ("scripts/test", Skip("the test command itself")),
    (
        "cargo run -p patronus-examples --example quickstart",
        Skip(".ci/run's `examples` stage runs it"),
    ),
    (
        "cargo run -p patronus-examples --example counter_table",
        Skip(".ci/run's `examples` stage runs it"),
    ),
    (
        "cargo run --release -p patronus-bench -- all",
        Skip("the full evaluation takes many minutes; its quick form is the bench smoke test"),
    ),
    (
        "cargo run --release -p patronus-bench -- fig5 --quick",
        Skip(BENCH_SMOKE),
    ),
    (
        "cargo run --release -p patronus-bench -- all --quick --transport tcp",
        Skip(BENCH_SMOKE),
    ),
    (
        "cargo run --release -p patronus-bench -- fig6 --quick --isolation pd-per-client",
        Skip(
            "crates/bench/tests/experiments_smoke.rs runs the isolation-mode experiment, which \
             runs fig6's mix in every mode",
        ),
    ),
    ("cargo run --release -p patronus-cli -- demo", Run),
    (
        "cargo bench -p rnic --bench rnic_micro",
        Skip("a benchmark of minutes; clippy --all-targets in .ci/run builds it"),
    ),
    (
        "cargo bench -p patronus-core --bench manager_alone",
        Skip("scripts/test runs every case once in test mode (cargo test --bench manager_alone)"),
    ),
    (
        "scripts/manager-instructions",
        Skip("scripts/test runs it with --quick (batches 2 and 16)"),
    ),
    (
        "cargo run --release -p patronus-cli -- serve --tenant 1:0x5ec2e7",
        Run,
    ),
    (
        "cargo run --release -p patronus-cli -- serve --print-default-config",
        Run,
    ),
    ("cargo run --release -p patronus-cli -- status", Run),
    (
        "cargo run --release -p patronus-cli -- probe --connect 127.0.0.1:7471 --tenant 1:0x5ec2e7",
        Run,
    ),
    (
        "cargo run --release -p patronus-cli -- kv --connect 127.0.0.1:7471 --tenant 1:0x5ec2e7 create",
        Run,
    ),
    (
        "cargo run --release -p patronus-cli -- faas --connect 127.0.0.1:7471 --tenant 1:0x5ec2e7 image --input crates/faas/testdata/rocket.jpg --out thumb.jpg",
        Run,
    ),
    ("cargo run --release -p patronus-cli -- faas analyse", Run),
    ("cargo run --release -p patronus-cli -- devices", Run),
    (
        "cargo run --release -p patronus-cli -- certs --out certs",
        Skip(
            "it writes into the working tree; crates/cli/tests/tls.rs runs certs, then serve \
              with TLS and kv and probe with a tenant's certificate",
        ),
    ),
    (
        "cargo test --release -p patronus-ods --test race_history soak -- --ignored --nocapture",
        Skip("an #[ignore]d soak of minutes; CI runs its short forms (race_history's other tests)"),
    ),
    (
        "cargo run --release -p patronus-scenario -- faults --duration 60s --seed 1",
        Skip(
            "a run of a minute against the release binary; crates/cli/tests/scenario_smoke.rs \
             runs a 30 s form of it (4 loops) against the test build",
        ),
    ),
    (
        "cargo run --release -p patronus-scenario -- busy --duration 600s --burners 4 --loops 16",
        Skip("ten minutes with four CPU burners: a measurement, not a test"),
    ),
    (
        "cargo test --release -p patronus-ods --test race_split_schedules -- --ignored --nocapture",
        Skip("an #[ignore]d exploration of minutes; CI runs it at each phase change"),
    ),
    (
        "cargo test --release -p patronus-core --test denial_of_service soak_ -- --ignored --nocapture --test-threads 1",
        Skip("an #[ignore]d soak of minutes; CI runs its short form (churn::*, short_soak_*)"),
    ),
    (
        "cargo test -p rnic -p patronus-core --test fuzz_smoke",
        Skip("scripts/test runs these tests"),
    ),
    (
        "cd fuzz && cargo +nightly fuzz run wire_decode -- -max_total_time=60",
        Skip("needs cargo-fuzz and a nightly toolchain, which CI machines do not have"),
    ),
    (
        "RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps",
        Skip(".ci/run's `rustdoc` stage runs it"),
    ),
    (
        "cargo build --release -p patronus-cli",
        Skip("cargo built the binary this test runs"),
    ),
    ("target/release/patronus serve --tenant 1:0x5ec2e7", Run),
    (
        "alias kv='target/release/patronus kv --connect 127.0.0.1:7471 --tenant 1:0x5ec2e7 --table users'",
        Run,
    ),
    ("kv create", Run),
    ("kv put alice \"Alice Liddell\"", Run),
    ("kv put bob \"Bob Dobbs\"", Run),
    ("kv put alice \"Alice L.\"", Run),
    ("kv get alice", Run),
    ("kv put carol --value-file photo.bin", Run),
    ("kv get carol --format hex", Run),
    ("kv scan", Run),
    ("kv del bob", Run),
    ("kv get bob; echo \"exit $?\"", Run),
    (
        "kv put dave \"$(head -c 300 /dev/zero | tr '\\0' x)\"; echo \"exit $?\"",
        Run,
    ),
    ("kv info", Run),
    ("kv drop", Run),
    // The TLS walkthrough.
    (
        "target/release/patronus certs --out certs --tenant tenant-1",
        Run,
    ),
    (
        "target/release/patronus serve --tenant 1:0x5ec2e7 --tenant-certificate 1:tenant-1 \
         --tls-cert certs/node.pem --tls-key certs/node-key.pem --tls-client-ca certs/ca.pem",
        Run,
    ),
    (
        "alias tkv='target/release/patronus kv --connect 127.0.0.1:7471 --table users \
         --tls-cert certs/tenant-1.pem --tls-key certs/tenant-1-key.pem --tls-ca certs/ca.pem'",
        Run,
    ),
    (
        "tkv create && tkv put alice \"Alice Liddell\" && tkv get alice",
        Run,
    ),
    (
        "target/release/patronus kv --connect 127.0.0.1:7471 get alice; echo \"exit $?\"",
        Run,
    ),
];

/// A command the README shows, with the output it shows under it (text blocks only).
#[derive(Debug)]
struct Shown {
    command: String,
    output: Vec<String>,
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every command of the README, in order.
fn commands(text: &str) -> Vec<Shown> {
    let mut found = Vec::new();
    let mut block: Option<&str> = None;
    let mut in_table = false;
    let mut continued = false;
    for line in text.lines() {
        if let Some(fence) = line.strip_prefix("```") {
            block = match block {
                None => Some(fence.trim()),
                Some(_) => None,
            };
            continue;
        }
        match block {
            Some("sh") => {
                let l = line.trim();
                if !l.is_empty() && !l.starts_with('#') {
                    found.push(Shown {
                        command: l.to_string(),
                        output: Vec::new(),
                    });
                }
            }
            Some(_) => {
                if let Some(cmd) = line.strip_prefix("$ ") {
                    continued = cmd.ends_with('\\');
                    found.push(Shown {
                        command: strip_comment(cmd).trim_end_matches('\\').to_string(),
                        output: Vec::new(),
                    });
                } else if let (true, Some(last)) = (continued, found.last_mut()) {
                    // `\` at the end: the command goes on on this line.
                    continued = line.ends_with('\\');
                    last.command.push_str(line.trim().trim_end_matches('\\'));
                } else if let Some(last) = found.last_mut() {
                    last.output.push(line.to_string());
                }
            }
            None => {
                if line.starts_with("## ") {
                    in_table = line == "## More commands";
                } else if in_table && line.starts_with("| ") && !line.starts_with("| what") {
                    let cell = line
                        .trim_end_matches('|')
                        .rsplit(" | ")
                        .next()
                        .unwrap_or("");
                    let command = cell.trim().trim_matches('`');
                    found.push(Shown {
                        command: command.to_string(),
                        output: Vec::new(),
                    });
                }
            }
        }
    }
    found
}

/// `kv create                       # --block-size, …` without its comment.
fn strip_comment(cmd: &str) -> &str {
    match cmd.find("  #") {
        Some(i) => cmd[..i].trim_end(),
        None => cmd,
    }
}

fn plan(command: &str) -> Option<Plan> {
    PLANS.iter().find(|(c, _)| *c == command).map(|(_, p)| *p)
}

#[test]
fn every_readme_command_is_run_or_skipped_with_a_reason() {
    let shown = commands(&readme());
    assert!(shown.len() >= 20, "too few commands found: {shown:?}");
    let unplanned: Vec<&str> = shown
        .iter()
        .map(|s| s.command.as_str())
        .filter(|c| plan(c).is_none())
        .collect();
    assert!(
        unplanned.is_empty(),
        "README commands this test neither runs nor skips (add each to PLANS): {unplanned:#?}"
    );
    let gone: Vec<&str> = PLANS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !shown.iter().any(|s| s.command == *c))
        .collect();
    assert!(
        gone.is_empty(),
        "PLANS lists commands the README no longer has: {gone:#?}"
    );
    for (command, p) in PLANS {
        if let Skip(why) = p {
            println!("SKIPPED {command}: {why}");
        }
    }
}

/// The command as this test runs it: the binary for `cargo run` and `target/release`, the
/// test node's addresses for the documented ones.
fn localize(command: &str, node: &Served) -> String {
    command
        .replace("cargo run --release -p patronus-cli --", EXE)
        .replace("target/release/patronus", EXE)
        .replace("127.0.0.1:7471", &node.listen.to_string())
        .replace("127.0.0.1:9471", &node.admin.to_string())
}

/// Runs `script` with bash in `dir`, stderr into stdout (as a terminal shows them).
fn bash(dir: &Path, script: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("exec 2>&1\nshopt -s expand_aliases\n{script}"))
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("PATRONUS_NO_PROGRESS", "1")
        .output()
        .expect("run bash")
}

/// Lines with what differs from run to run replaced: addresses, ports, hex values.
fn redact(text: &str) -> String {
    let addr = Regex::new(r"127\.0\.0\.1:\d+").unwrap();
    let hex = Regex::new(r"0x[0-9a-fA-F]+").unwrap();
    let text = addr.replace_all(text, "127.0.0.1:PORT");
    hex.replace_all(&text, "0xHEX").into_owned()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs one README command of the table (not the walkthrough) and checks what it printed.
fn run_listed(command: &str, node: &Served, dir: &Path) {
    let mut line = localize(command, node);
    if command.ends_with("-- status") {
        // The documented default admin address is the test node's.
        line = format!("{line} {}", node.admin);
    }
    let out = bash(dir, &line);
    let printed = text(&out);
    let code = out.status.code();
    if command.ends_with("-- devices") {
        // 0: devices listed; 2: none; 3: no libibverbs (CI has none).
        assert!(
            matches!(code, Some(0 | 2 | 3)),
            "{command}: exit {code:?}\n{printed}"
        );
        println!("ran `{command}`: exit {code:?}: {}", printed.trim());
        return;
    }
    assert_eq!(code, Some(0), "{command}:\n{printed}");
    let expect: &[&str] = match command {
        c if c.ends_with("-- demo") => &[
            "[1] alice allocates",
            "[3] bob asks for a shared read permission",
            "[4] alice tries to extend again: refused",
            "[5] alice revokes: bob's waiting acquire is granted",
            "[6] carol acquires with a 20 ms lease",
            "Memory node report",
        ],
        c if c.ends_with("--print-default-config") => {
            &["listen = \"127.0.0.1:7471\"", "admin = \"127.0.0.1:9471\""]
        }
        c if c.ends_with("-- status") => &["listening", "permissions", "sessions"],
        c if c.contains("-- probe") => &["probe ok: across processes"],
        c if c.contains("-- kv") => &["created table \"kv\""],
        c if c.contains("image --input") => &["rocket.jpg (640 × 427) → thumb.jpg (128 × 85)"],
        c if c.ends_with("faas analyse") => &["department  employees  average salary"],
        other => panic!("no expectation for {other}"),
    };
    for e in expect {
        assert!(printed.contains(e), "{command}: no {e:?} in:\n{printed}");
    }
    println!("ran `{command}`: ok");
}

#[test]
fn the_readme_commands_work() {
    let shown = commands(&readme());
    let dir = std::env::temp_dir().join(format!("patronus-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("crates/faas/testdata")).unwrap();
    std::fs::copy(
        root().join("crates/faas/testdata/rocket.jpg"),
        dir.join("crates/faas/testdata/rocket.jpg"),
    )
    .unwrap();
    // The walkthrough's `--value-file photo.bin`: the bytes its `get --format hex` shows.
    std::fs::write(dir.join("photo.bin"), b"binary\0bytes").unwrap();

    // One node, started as the README starts it (its serve rows are the same command).
    let node = Served::start(&["--tenant", "1:0x5ec2e7"]);
    let serve_row = shown
        .iter()
        .find(|s| s.command == "target/release/patronus serve --tenant 1:0x5ec2e7")
        .expect("the walkthrough starts a node");
    assert_eq!(
        redact(&node.banner.join("\n")),
        redact(&serve_row.output.join("\n")),
        "serve's first lines"
    );

    // The table's rows, in README order.
    for s in &shown {
        let is_walkthrough = s.command.starts_with("kv ")
            || s.command.starts_with("alias kv=")
            || s.command.starts_with("tkv ")
            || s.command.starts_with("alias tkv=")
            || s.command.starts_with("target/release/patronus");
        if plan(&s.command) == Some(Run)
            && !is_walkthrough
            && !s.command.contains("-- serve --tenant")
        {
            run_listed(&s.command, &node, &dir);
        }
    }

    // The key-value walkthrough: each command in its own shell, with the README's alias.
    let alias = shown
        .iter()
        .find(|s| s.command.starts_with("alias kv="))
        .map(|s| localize(&s.command, &node))
        .expect("the walkthrough's alias");
    for s in shown.iter().filter(|s| s.command.starts_with("kv ")) {
        let out = bash(&dir, &format!("{alias}\n{}", s.command));
        let printed = text(&out);
        if !s.command.contains("echo \"exit $?\"") {
            assert!(out.status.success(), "`{}`: {printed}", s.command);
        }
        let want = redact(&s.output.join("\n"));
        assert_eq!(
            redact(printed.trim_end()),
            want.trim_end(),
            "`{}` printed something else",
            s.command
        );
        println!("ran `{}`: as the README shows", s.command);
    }

    let report = node.terminate();
    assert!(report.contains("shutdown: every lease ended"), "{report}");
    tls_walkthrough(&shown, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's TLS walkthrough: test certificates, a node that requires TLS and names the
/// tenant by its certificate, a client with the certificate, one without.
fn tls_walkthrough(shown: &[Shown], dir: &Path) {
    let find = |prefix: &str| {
        shown
            .iter()
            .find(|s| s.command.starts_with(prefix))
            .unwrap_or_else(|| panic!("the TLS walkthrough's `{prefix}…`"))
    };
    let certs = find("target/release/patronus certs");
    let out = bash(dir, &certs.command.replace("target/release/patronus", EXE));
    assert_eq!(
        text(&out).trim_end(),
        certs.output.join("\n").trim_end(),
        "`{}`",
        certs.command
    );

    let serve = find("target/release/patronus serve --tenant 1:0x5ec2e7 --tenant-certificate");
    let in_dir = |a: &str| match a.strip_prefix("certs/") {
        Some(file) => dir.join("certs").join(file).to_string_lossy().into_owned(),
        None => a.to_string(),
    };
    let args: Vec<String> = serve
        .command
        .trim_start_matches("target/release/patronus serve ")
        .split_whitespace()
        .map(in_dir)
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = Served::start(&args);
    assert_eq!(
        redact(&node.banner.join("\n")),
        redact(serve.output.join("\n").trim_end()),
        "TLS serve's first lines"
    );

    let alias = localize(&find("alias tkv=").command, &node);
    let clients = shown.iter().filter(|s| {
        s.command.starts_with("tkv ") || s.command.starts_with("target/release/patronus kv")
    });
    for s in clients {
        let out = bash(dir, &format!("{alias}\n{}", localize(&s.command, &node)));
        assert_eq!(
            redact(text(&out).trim_end()),
            redact(s.output.join("\n").trim_end()),
            "`{}` printed something else",
            s.command
        );
        println!("ran `{}`: as the README shows", s.command);
    }
    drop(node);
}

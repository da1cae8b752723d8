//! `patronus kv` against `patronus serve`, each in its own process: the commands, their
//! errors and exit codes, tenants kept apart, and a node left holding nothing once the tables
//! are dropped.

mod support;

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use support::{EXE, Served};

const ALICE: &str = "1:0xa11ce";
const BOB: &str = "2:0xb0b";

/// Runs `patronus kv --connect addr [--tenant t] args...` with `stdin` piped in.
fn kv_in(addr: &str, tenant: Option<&str>, args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(EXE);
    cmd.args(["kv", "--connect", addr]);
    if let Some(t) = tenant {
        cmd.args(["--tenant", t]);
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kv");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("kv runs")
}

fn kv(addr: &str, tenant: &str, args: &[&str]) -> Output {
    kv_in(addr, Some(tenant), args, b"")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code, showing the output otherwise; returns stdout.
fn expect(o: &Output, code: i32) -> String {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
    stdout(o)
}

#[test]
fn a_table_through_kv_commands_in_separate_processes() {
    let server = Served::start(&["--pool-mib", "16", "--tenant", ALICE, "--tenant", BOB]);
    let a = server.listen.to_string();
    let alice = |args: &[&str]| kv(&a, ALICE, args);

    assert!(expect(&alice(&["create"]), 0).contains("created table \"kv\""));
    assert!(stderr(&alice(&["create"])).contains("exists already"));
    expect(&alice(&["create"]), 5);

    assert_eq!(expect(&alice(&["put", "apple", "red"]), 0), "inserted\n");
    assert_eq!(
        expect(&alice(&["put", "banana", "yellow"]), 0),
        "inserted\n"
    );
    assert_eq!(expect(&alice(&["get", "apple"]), 0), "red\n");
    assert_eq!(expect(&alice(&["put", "apple", "green"]), 0), "updated\n");
    assert_eq!(expect(&alice(&["get", "apple"]), 0), "green\n");

    // Binary-safe values: from stdin, back byte for byte.
    let binary = b"\0bin\xffary\n\tend".to_vec();
    let put = kv_in(
        &a,
        Some(ALICE),
        &["put", "blob", "--value-file", "-"],
        &binary,
    );
    expect(&put, 0);
    let got = alice(&["get", "blob", "--format", "raw"]);
    expect(&got, 0);
    assert_eq!(got.stdout, binary);
    let hex: String = binary.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        expect(&alice(&["get", "blob", "--format", "hex"]), 0),
        hex + "\n"
    );
    // ... and binary keys.
    expect(&alice(&["--key-hex", "put", "00ff", "k"]), 0);

    assert_eq!(
        expect(&alice(&["scan"]), 0),
        "\\x00\u{fffd}\tk\napple\tgreen\nbanana\tyellow\nblob\t\\x00bin\u{fffd}ary\\n\\tend\n"
    );

    assert_eq!(expect(&alice(&["del", "banana"]), 0), "deleted\n");
    let gone = alice(&["get", "banana"]);
    expect(&gone, 3);
    assert!(
        stderr(&gone).contains("key \"banana\" not found"),
        "{}",
        stderr(&gone)
    );
    expect(&alice(&["del", "banana"]), 3);
    assert!(!expect(&alice(&["scan"]), 0).contains("banana"));

    // A name nothing is published under.
    let missing = alice(&["--table", "nope", "get", "apple"]);
    expect(&missing, 4);
    assert!(
        stderr(&missing).contains("no table \"nope\""),
        "{}",
        stderr(&missing)
    );

    // More than a KV block holds (default block 256 B: key + value up to 224 B).
    let big = "x".repeat(300);
    let too_big = alice(&["put", "big", &big]);
    expect(&too_big, 6);
    assert!(
        stderr(&too_big).contains("value too large") && stderr(&too_big).contains("holds 256"),
        "{}",
        stderr(&too_big)
    );
    let huge = kv_in(
        &a,
        Some(ALICE),
        &["put", "big", "--value-file", "-"],
        &[7; 9000],
    );
    expect(&huge, 6);
    expect(&alice(&["get", "big"]), 3);

    // Another tenant sees none of alice's tables, and has its own under the same name.
    let bob = |args: &[&str]| kv(&a, BOB, args);
    expect(&bob(&["get", "apple"]), 4);
    expect(&bob(&["scan"]), 4);
    // A tiny shape: subtables split as keys arrive, each put a process of its own.
    let shape = [
        "create",
        "--block-size",
        "128",
        "--initial-depth",
        "0",
        "--max-depth",
        "6",
        "--groups",
        "1",
        "--slots",
        "2",
    ];
    expect(&bob(&shape), 0);
    expect(&bob(&["put", "apple", "bob's"]), 0);
    assert_eq!(expect(&bob(&["scan"]), 0), "apple\tbob's\n");
    assert_eq!(expect(&alice(&["get", "apple"]), 0), "green\n");
    let mut want = vec!["apple\tbob's".to_string()];
    for i in 0..12 {
        let (k, v) = (format!("k{i:02}"), format!("v{i}"));
        expect(&bob(&["put", &k, &v]), 0);
        want.push(format!("{k}\t{v}"));
    }
    let info = expect(&bob(&["info"]), 0);
    assert!(info.contains("KV blocks of 128 bytes"), "{info}");
    assert!(
        info.contains("holds: 13 keys in") && !info.contains("in 1 subtables"),
        "{info}"
    );
    assert_eq!(expect(&bob(&["scan"]), 0), want.join("\n") + "\n");

    // A wrong secret, no tenant at all: refused, exit code 1.
    let intruder = kv(&a, "1:0x1", &["get", "apple"]);
    expect(&intruder, 1);
    assert!(
        stderr(&intruder).contains("refused tenant 1"),
        "{}",
        stderr(&intruder)
    );
    expect(&kv_in(&a, None, &["get", "apple"], b""), 1);

    // Every command closed what it held: no session, and after the drops, no memory.
    assert!(expect(&bob(&["drop"]), 0).contains("dropped table \"kv\""));
    assert!(expect(&alice(&["drop"]), 0).contains("freed 2 subtables and 3 KV blocks"));
    expect(&alice(&["get", "apple"]), 4);
    expect(&alice(&["drop"]), 4);
    let report = server.terminate();
    assert!(report.contains("sessions: 0 connected now"), "{report}");
    assert!(report.contains("pool: 0 bytes in use"), "{report}");
}

#[test]
fn bad_addresses_and_arguments() {
    // Malformed: a usage error from the argument parser.
    let o = kv_in("not-an-address", None, &["get", "k"], b"");
    expect(&o, 2);
    assert!(stderr(&o).contains("expected HOST:PORT"), "{}", stderr(&o));
    // Nothing listens on a port just freed.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let o = kv_in(&format!("127.0.0.1:{port}"), None, &["get", "k"], b"");
    expect(&o, 1);
    assert!(
        stderr(&o).contains("cannot reach the memory node"),
        "{}",
        stderr(&o)
    );
    // An invalid shape is refused before connecting.
    let o = kv_in("127.0.0.1:1", None, &["create", "--block-size", "100"], b"");
    expect(&o, 2);
    assert!(stderr(&o).contains("block_size"), "{}", stderr(&o));
    let help = Command::new(EXE)
        .args(["kv", "--help"])
        .output()
        .expect("help");
    assert!(stdout(&help).contains("Exit codes:"), "{}", stdout(&help));
}

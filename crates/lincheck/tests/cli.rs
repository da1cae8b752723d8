//! The `lincheck` binary: exit code 0 linearizable, 1 violation (witness printed and written),
//! 2 undecided, 64 usage, 65 malformed history, 66 unreadable input.
#![allow(clippy::unwrap_used)] // test helpers, not #[test] fns

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use lincheck::{Budget, Entry, Status, Verdict, kv};

fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lincheck-cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn sample_kv() -> kv::History {
    let initial = BTreeMap::from([("k1".to_string(), "v0".to_string())]);
    let mut h = kv::History::with_initial(initial);
    h.done(
        3,
        1200,
        1850,
        kv::Op::put("k0", "v3"),
        kv::Outcome::Inserted,
    )
    .unwrap();
    h.done(1, 1900, 1950, kv::Op::get("k0"), kv::Outcome::value("v3"))
        .unwrap();
    h.unknown(2, 1500, kv::Op::delete("k1")).unwrap();
    let failed = Entry {
        client: 4,
        invoke: 10,
        complete: Some(20),
        op: kv::Op::update("k1", "x"),
        status: Status::Failed,
    };
    h.push(failed).unwrap();
    h
}

fn lincheck(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lincheck"))
        .args(args)
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn the_command_line_reports_by_exit_code() {
    let good = tmp("good.jsonl");
    sample_kv().write_jsonl(&good).unwrap();
    let (code, out, _) = lincheck(&["check", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("linearizable (kv model)"), "{out}");

    let mut h = kv::History::new();
    h.done(1, 0, 10, kv::Op::put("k", "a"), kv::Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 30, kv::Op::put("k", "b"), kv::Outcome::Updated)
        .unwrap();
    h.done(3, 40, 50, kv::Op::get("k"), kv::Outcome::value("a"))
        .unwrap();
    let bad = tmp("bad.jsonl");
    h.write_jsonl(&bad).unwrap();
    let witness = tmp("bad.witness.jsonl");
    let (code, out, _) = lincheck(&[
        "check",
        bad.to_str().unwrap(),
        "--witness-out",
        witness.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("3 of 3 operations cannot be linearized"),
        "{out}"
    );
    assert!(out.contains("get k -> \"a\""), "{out}");
    assert_eq!(kv::History::read_jsonl(&witness).unwrap().len(), 3);
    let (code, _, _) = lincheck(&["check", witness.to_str().unwrap()]);
    assert_eq!(code, 1);

    let mut busy = kv::History::new();
    for i in 0..10u64 {
        let outcome = if i == 0 {
            kv::Outcome::Inserted
        } else {
            kv::Outcome::Updated
        };
        busy.done(i, 0, 100, kv::Op::put("k", format!("v{i}")), outcome)
            .unwrap();
    }
    let busy_file = tmp("busy.jsonl");
    busy.write_jsonl(&busy_file).unwrap();
    let (code, out, _) = lincheck(&["check", busy_file.to_str().unwrap(), "--max-states", "3"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("undecided"), "{out}");

    let broken = tmp("broken.jsonl");
    std::fs::write(
        &broken,
        "{\"model\":\"queue\"}\n{\"client\":1,\"invoke\":0,\"op\":\"push\"}\n",
    )
    .unwrap();
    let (code, _, err) = lincheck(&["check", broken.to_str().unwrap()]);
    assert_eq!(code, 65);
    assert!(err.contains("broken.jsonl:2: missing field"), "{err}");
    let (code, _, err) = lincheck(&["check", good.to_str().unwrap(), "--model", "queue"]);
    assert_eq!(code, 65, "{err}");
    let (code, _, _) = lincheck(&["check", tmp("absent.jsonl").to_str().unwrap()]);
    assert_eq!(code, 66);
    let (code, _, _) = lincheck(&["check"]);
    assert_eq!(code, 64);
    let (code, _, _) = lincheck(&["frobnicate", good.to_str().unwrap()]);
    assert_eq!(code, 64);
    assert!(matches!(
        lincheck::check_kv(&h, Budget::default()),
        Verdict::Violation(_)
    ));
}

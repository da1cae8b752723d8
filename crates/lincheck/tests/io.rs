//! Files and recorders: JSON-lines round trips, parse errors that name the line, a recorder
//! shared by threads, and the evidence dumped by failed checks.
#![allow(clippy::unwrap_used)] // test helpers, not #[test] fns

use std::collections::BTreeMap;
use std::path::PathBuf;

use lincheck::jsonl::{self, AnyHistory};
use lincheck::{Budget, Entry, Error, Status, assert_linearizable, kv, queue, verify};

fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lincheck-io");
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

#[test]
fn kv_history_round_trips_through_json_lines() {
    let h = sample_kv();
    let text = jsonl::to_jsonl(&h);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], r#"{"model":"kv","initial":{"k1":"v0"}}"#);
    assert_eq!(
        lines[1],
        r#"{"client":3,"invoke":1200,"complete":1850,"op":"put","key":"k0","value":"v3","result":"inserted"}"#
    );
    assert_eq!(
        lines[2],
        r#"{"client":1,"invoke":1900,"complete":1950,"op":"get","key":"k0","result":"value","value":"v3"}"#
    );
    assert_eq!(
        lines[3],
        r#"{"client":2,"invoke":1500,"op":"delete","key":"k1","result":"unknown"}"#
    );
    let path = tmp("kv.jsonl");
    h.write_jsonl(&path).unwrap();
    assert_eq!(kv::History::read_jsonl(&path).unwrap(), h);
    assert!(matches!(jsonl::read_any(&path, None).unwrap(), AnyHistory::Kv(back) if back == h));
}

#[test]
fn queue_history_round_trips_and_is_recognised_without_a_header() {
    let mut h = queue::History::with_initial(vec!["x".into()]);
    h.done(4, 10, 20, queue::Op::push("a"), queue::Outcome::Ok)
        .unwrap();
    h.done(5, 30, 40, queue::Op::Pop, queue::Outcome::item("x"))
        .unwrap();
    h.done(5, 50, 60, queue::Op::Pop, queue::Outcome::item("a"))
        .unwrap();
    h.done(5, 70, 80, queue::Op::Pop, queue::Outcome::Empty)
        .unwrap();
    h.unknown(6, 90, queue::Op::Pop).unwrap();
    let text = jsonl::to_jsonl(&h);
    assert_eq!(jsonl::parse::<queue::Queue>(&text, "t").unwrap(), h);
    assert!(text.contains(
        r#"{"client":5,"invoke":30,"complete":40,"op":"pop","result":"item","item":"x"}"#
    ));
    let headless: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    match jsonl::parse_any(&headless, "t", None).unwrap() {
        AnyHistory::Queue(q) => assert_eq!(q.len(), 5),
        other => panic!("expected a queue, got {other:?}"),
    }
}

/// The error for `text`, which must be one parse error at `line`.
fn parse_error(text: &str, line: usize) -> String {
    match jsonl::parse_any(text, "h.jsonl", None) {
        Err(Error::Parse {
            line: l, message, ..
        }) => {
            assert_eq!(l, line, "{message}");
            message
        }
        other => panic!("expected a parse error at line {line}, got {other:?}"),
    }
}

#[test]
fn malformed_lines_are_named() {
    let good = r#"{"client":1,"invoke":0,"complete":1,"op":"put","key":"k","value":"v","result":"inserted"}"#;
    let cases = [
        ("{not json", "not a JSON object"),
        (
            r#"{"client":1,"invoke":0,"complete":1,"op":"put","key":"k","result":"inserted"}"#,
            "missing field `value`",
        ),
        (
            r#"{"client":1,"invoke":0,"complet":1,"op":"put","key":"k","value":"v","result":"inserted"}"#,
            "unexpected field `complet`",
        ),
        (
            r#"{"client":1,"invoke":0,"complete":1,"op":"put","key":"k","value":"v","result":"exists"}"#,
            "`put` cannot return `exists`",
        ),
        (
            r#"{"client":1,"invoke":5,"complete":1,"op":"get","key":"k","result":"absent"}"#,
            "before it was invoked",
        ),
        (
            r#"{"client":1,"invoke":5,"op":"get","key":"k","result":"absent"}"#,
            "needs a `complete` time",
        ),
        (
            r#"{"client":-1,"invoke":5,"complete":6,"op":"get","key":"k","result":"absent"}"#,
            "non-negative integer",
        ),
        (
            r#"{"client":1,"invoke":5,"complete":6,"op":"pop","result":"empty"}"#,
            "unknown kv op `pop`",
        ),
        (r#"{"model":"kv"}"#, "only allowed on the first line"),
    ];
    for (bad, expected) in cases {
        let text = format!("{good}\n\n{bad}\n{good}\n");
        let message = parse_error(&text, 3);
        assert!(message.contains(expected), "{bad}: {message}");
    }
    let message = parse_error(r#"{"model":"stack"}"#, 1);
    assert!(message.contains("unknown model `stack`"), "{message}");
    let shown = jsonl::parse_any("{oops", "h.jsonl", None)
        .unwrap_err()
        .to_string();
    assert!(shown.starts_with("h.jsonl:1: "), "{shown}");
}

#[test]
fn a_recorder_is_shared_by_threads() {
    let recorder = kv::Recorder::new();
    std::thread::scope(|s| {
        for client in 0..4u64 {
            let recorder = &recorder;
            s.spawn(move || {
                for i in 0..50 {
                    let key = format!("k{client}");
                    let t = recorder.invoke(client, kv::Op::put(&key, format!("v{i}")));
                    let outcome = if i == 0 {
                        kv::Outcome::Inserted
                    } else {
                        kv::Outcome::Updated
                    };
                    recorder.complete(t, outcome);
                    let t = recorder.invoke(client, kv::Op::get(&key));
                    recorder.complete(t, kv::Outcome::value(format!("v{i}")));
                }
                let lost = recorder.invoke(client, kv::Op::delete(format!("k{client}")));
                recorder.unknown(lost);
                let _in_flight = recorder.invoke(client, kv::Op::get("elsewhere"));
            });
        }
    });
    let h = recorder.into_history();
    assert_eq!(h.len(), 4 * 102);
    assert!(
        h.entries()
            .iter()
            .all(|e| e.status.done().is_some() || e.complete.is_none())
    );
    assert_linearizable(&h, Budget::default(), tmp("dumps"));
}

#[test]
fn manual_times_are_recorded_as_given() {
    let recorder = queue::Recorder::new();
    let t = recorder.invoke_at(1, queue::Op::push("a"), 100);
    recorder.complete_at(t, queue::Outcome::Ok, 150);
    let t = recorder.invoke_at(2, queue::Op::Pop, 160);
    recorder.failed(t);
    let h = recorder.history();
    assert_eq!(
        (h.entries()[0].invoke, h.entries()[0].complete),
        (100, Some(150))
    );
    assert_eq!(h.entries()[1].status, Status::Failed);
}

#[test]
fn failed_checks_write_the_evidence() {
    let mut h = kv::History::new();
    h.done(1, 0, 10, kv::Op::put("k", "a"), kv::Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 30, kv::Op::get("k"), kv::Outcome::Absent)
        .unwrap();
    let err = verify(&h, Budget::default(), tmp("dumps")).unwrap_err();
    let Error::NotLinearizable {
        dump: Some(dump),
        report,
    } = &err
    else {
        panic!("{err}")
    };
    assert!(report.contains("get k -> absent"), "{report}");
    assert_eq!(kv::History::read_jsonl(&dump.history).unwrap(), h);
    let witness = kv::History::read_jsonl(dump.witness.as_ref().unwrap()).unwrap();
    assert_eq!(witness.len(), 2);
    let message = err.to_string();
    assert!(
        message.contains(&dump.history.display().to_string()),
        "{message}"
    );

    let panic =
        std::panic::catch_unwind(|| assert_linearizable(&h, Budget::default(), tmp("dumps")))
            .unwrap_err();
    let text = panic.downcast_ref::<String>().unwrap();
    assert!(
        text.contains("not linearizable") && text.contains(".witness.jsonl"),
        "{text}"
    );

    // Undecided is a failure too, with the history dumped.
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
    match verify(&busy, Budget::states(2), tmp("dumps")) {
        Err(Error::Undecided {
            dump: Some(dump), ..
        }) => assert!(dump.witness.is_none() && dump.history.exists()),
        other => panic!("expected undecided, got {other:?}"),
    }
}

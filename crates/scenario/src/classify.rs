//! What a `kv` invocation's exit code and output tell the checker.
//!
//! `patronus kv` exits 0 on success (put prints `inserted` or `updated`, del `deleted`, get
//! the value: hex with `--format hex`), 3 when get or del found no key, 4 when no table is
//! published under the name, 1 on any other error (`kv --help` lists them). So:
//!
//! - exit 0 and exit 3 of get/del: a known result;
//! - exit 4: *failed*, definitely no effect: the name lookup is the first thing a command
//!   does with the table (`open_named`), and it found nothing;
//! - exit 1 with the message of an error raised while connecting, before the table is touched
//!   (`cannot reach the memory node`, `… ended this command's session`, a refused tenant):
//!   *failed* as well. Every other exit-1 error (remote memory, busy, contended, a lease too
//!   short for the path, …) may come after some of the operation's writes: *unknown*;
//! - a process killed by a signal: *unknown* (it may have done its write before it died);
//! - anything else (a panic's exit 101, output that is not what the command prints, put
//!   exiting 3): *unknown*, and an anomaly the report counts as a violation.

use crate::invoke::{Ended, KvOp};
use lincheck::Status;
use lincheck::kv::Outcome;

/// What one invocation means for the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classified {
    /// The entry's status: a known result, unknown, or failed (no effect).
    pub status: Status<Outcome>,
    /// Something a correct `kv` never does (a violation by itself), if it did.
    pub anomaly: Option<String>,
}

impl Classified {
    fn done(outcome: Outcome) -> Self {
        Classified {
            status: Status::Done(outcome),
            anomaly: None,
        }
    }

    fn failed() -> Self {
        Classified {
            status: Status::Failed,
            anomaly: None,
        }
    }

    fn unknown() -> Self {
        Classified {
            status: Status::Unknown,
            anomaly: None,
        }
    }

    fn anomaly(why: String) -> Self {
        Classified {
            status: Status::Unknown,
            anomaly: Some(why),
        }
    }
}

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: any other error.
pub const EXIT_ERROR: i32 = 1;
/// Exit code: get or del of a key the table does not hold.
pub const EXIT_NO_KEY: i32 = 3;
/// Exit code: no table under the name.
pub const EXIT_NO_TABLE: i32 = 4;

/// Whether an invocation failed in the busy run's sense: any end but exit 0, or exit 3 of a
/// get or del (an absent key is an answer).
pub fn is_failure(op: &KvOp, ended: Ended) -> bool {
    match ended {
        Ended::Exit(EXIT_OK) => false,
        Ended::Exit(EXIT_NO_KEY) => matches!(op, KvOp::Put { .. }),
        _ => true,
    }
}

/// The error line `kv` printed (its last line starting `error: `).
pub fn error_line(stderr: &str) -> Option<&str> {
    stderr.lines().rev().find(|l| l.starts_with("error: "))
}

/// Whether `kv` failed while connecting, before it touched the table: its errors
/// `Unreachable`, `SessionEnded` and `Refused` (crates/cli/src/kv/error.rs), which only
/// `Session::connect` raises.
pub fn failed_connecting(stderr: &str) -> bool {
    let Some(line) = error_line(stderr) else {
        return false;
    };
    line.starts_with("error: cannot reach the memory node at ")
        || (line.starts_with("error: the memory node at ")
            && (line.contains(" ended this command's session (")
                || line.contains(" refused tenant ")
                || line.contains(" serves tenants: not authenticated")))
}

/// Classifies an invocation of `op` that ended `ended` after printing `stdout`, `stderr`.
pub fn classify(op: &KvOp, ended: Ended, stdout: &str, stderr: &str) -> Classified {
    let code = match ended {
        Ended::Signal(_) => return Classified::unknown(),
        Ended::Exit(code) => code,
    };
    let printed = stdout.trim_end_matches('\n');
    match (op, code) {
        (KvOp::Put { .. }, EXIT_OK) => match printed {
            "inserted" => Classified::done(Outcome::Inserted),
            "updated" => Classified::done(Outcome::Updated),
            other => Classified::anomaly(format!("put printed {other:?}")),
        },
        (KvOp::Del { .. }, EXIT_OK) => match printed {
            "deleted" => Classified::done(Outcome::Deleted),
            other => Classified::anomaly(format!("del printed {other:?}")),
        },
        (KvOp::Get { .. }, EXIT_OK) => match unhex(printed).map(String::from_utf8) {
            Some(Ok(value)) => Classified::done(Outcome::value(value)),
            _ => Classified::anomaly(format!("get printed {printed:?}, not hex of UTF-8")),
        },
        (KvOp::Get { .. } | KvOp::Del { .. }, EXIT_NO_KEY) => Classified::done(Outcome::Absent),
        (_, EXIT_NO_TABLE) => Classified::failed(),
        (_, EXIT_ERROR) if failed_connecting(stderr) => Classified::failed(),
        (_, EXIT_ERROR) => Classified::unknown(),
        (_, code) => Classified::anomaly(format!(
            "{} exited {code}: {}",
            op.name(),
            error_line(stderr).unwrap_or(stderr.trim())
        )),
    }
}

/// The bytes of a lowercase hex string.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect()
}

/// Lowercase hex of `s`'s bytes (the inverse of what `get --format hex` prints).
pub fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Parses the lines of `kv scan --format hex`: `keyhex<TAB>valuehex`.
pub fn parse_scan(stdout: &str) -> Result<Vec<(String, String)>, String> {
    stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (k, v) = line
                .split_once('\t')
                .ok_or_else(|| format!("scan line without a tab: {line:?}"))?;
            let text = |h: &str| {
                unhex(h)
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| format!("scan line not hex of UTF-8: {line:?}"))
            };
            Ok((text(k)?, text(v)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put() -> KvOp {
        KvOp::Put {
            key: "k".into(),
            value: "v".into(),
        }
    }

    fn get() -> KvOp {
        KvOp::Get { key: "k".into() }
    }

    fn del() -> KvOp {
        KvOp::Del { key: "k".into() }
    }

    #[test]
    fn results_come_from_exit_codes_and_output() {
        let ok = Ended::Exit(0);
        let c = |op: &KvOp, ended, out: &str| classify(op, ended, out, "").status;
        assert_eq!(c(&put(), ok, "inserted\n"), Status::Done(Outcome::Inserted));
        assert_eq!(c(&put(), ok, "updated\n"), Status::Done(Outcome::Updated));
        assert_eq!(c(&del(), ok, "deleted\n"), Status::Done(Outcome::Deleted));
        assert_eq!(
            c(&get(), ok, "76312e33\n"),
            Status::Done(Outcome::value("v1.3"))
        );
        assert_eq!(c(&get(), ok, "\n"), Status::Done(Outcome::value("")));
        assert_eq!(c(&get(), Ended::Exit(3), ""), Status::Done(Outcome::Absent));
        assert_eq!(c(&del(), Ended::Exit(3), ""), Status::Done(Outcome::Absent));
        assert_eq!(hex("v1.3"), "76312e33");
    }

    #[test]
    fn errors_before_the_table_is_touched_are_failures_and_others_unknown() {
        let one = Ended::Exit(1);
        let unreachable = "error: cannot reach the memory node at 127.0.0.1:7471: connection \
                           refused\n";
        assert_eq!(
            classify(&put(), one, "", unreachable).status,
            Status::Failed
        );
        let ended = "error: the memory node at 127.0.0.1:7471 ended this command's session (it \
                     was silent past the node's idle timeout); run the command again\n";
        assert_eq!(classify(&del(), one, "", ended).status, Status::Failed);
        let no_table = "error: no table \"kv\" for this tenant\n";
        assert_eq!(
            classify(&put(), Ended::Exit(4), "", no_table).status,
            Status::Failed
        );
        // After the table was opened, an error may follow some of the operation's writes.
        let memory = "warning: closing table \"kv\": …\nerror: table \"kv\": remote memory: \
                      the node did not answer\n";
        assert_eq!(classify(&put(), one, "", memory).status, Status::Unknown);
        let busy = "error: table \"kv\" is busy: another client …\n";
        assert_eq!(classify(&put(), one, "", busy).status, Status::Unknown);
        // The connect message quoted inside another error does not count.
        let nested = "error: table \"kv\": remote memory: cannot reach the memory node at x\n";
        assert_eq!(classify(&get(), one, "", nested).status, Status::Unknown);
        let killed = classify(&put(), Ended::Signal(9), "", "");
        assert_eq!(killed.status, Status::Unknown);
        assert_eq!(killed.anomaly, None);
    }

    #[test]
    fn what_kv_never_does_is_an_anomaly() {
        let odd = |op: &KvOp, ended, out: &str, err: &str| {
            let c = classify(op, ended, out, err);
            assert_eq!(c.status, Status::Unknown);
            c.anomaly.expect("an anomaly")
        };
        assert!(odd(&put(), Ended::Exit(0), "exists\n", "").contains("put printed"));
        assert!(odd(&put(), Ended::Exit(3), "", "error: key \"k\" not found").contains("exited 3"));
        assert!(odd(&get(), Ended::Exit(0), "zz\n", "").contains("not hex"));
        assert!(odd(&get(), Ended::Exit(101), "", "thread 'main' panicked").contains("101"));
    }

    #[test]
    fn failures_are_every_end_but_success_and_an_absent_key() {
        assert!(!is_failure(&put(), Ended::Exit(0)));
        assert!(!is_failure(&get(), Ended::Exit(3)));
        assert!(!is_failure(&del(), Ended::Exit(3)));
        assert!(is_failure(&put(), Ended::Exit(3)));
        assert!(is_failure(&get(), Ended::Exit(1)));
        assert!(is_failure(&get(), Ended::Exit(4)));
        assert!(is_failure(&get(), Ended::Signal(9)));
    }

    #[test]
    fn scans_parse_from_hex() {
        let out = format!("{}\t{}\n{}\t{}\n", hex("a"), hex("x y"), hex("b"), hex(""));
        assert_eq!(
            parse_scan(&out).expect("parses"),
            [("a".into(), "x y".into()), ("b".into(), String::new())]
        );
        assert!(parse_scan("6a\n").is_err());
    }
}

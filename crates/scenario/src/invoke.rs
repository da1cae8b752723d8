//! One `patronus kv` invocation: spawned as a user would run it, timed on the run's clock,
//! and signallable by the fault injector while (and only while) it has not been reaped.

use crate::clock::Clock;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use serde::Serialize;
use std::io;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A key-value operation as a `kv` command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum KvOp {
    /// `kv put KEY VALUE`: prints `inserted` or `updated`.
    Put {
        /** The key. */
        key: String,
        /** The value. */
        value: String,
    },
    /// `kv get KEY --format hex`: prints the value in hex; exit 3 if absent.
    Get {
        /** The key. */
        key: String,
    },
    /// `kv del KEY`: prints `deleted`; exit 3 if absent.
    Del {
        /** The key. */
        key: String,
    },
}

impl KvOp {
    /// The key.
    pub fn key(&self) -> &str {
        match self {
            KvOp::Put { key, .. } | KvOp::Get { key } | KvOp::Del { key } => key,
        }
    }

    /// The command's arguments after `kv --connect ADDR`.
    pub fn args(&self) -> Vec<String> {
        match self {
            KvOp::Put { key, value } => vec!["put".into(), key.clone(), value.clone()],
            KvOp::Get { key } => vec!["get".into(), key.clone(), "--format".into(), "hex".into()],
            KvOp::Del { key } => vec!["del".into(), key.clone()],
        }
    }

    /// Its name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            KvOp::Put { .. } => "put",
            KvOp::Get { .. } => "get",
            KvOp::Del { .. } => "del",
        }
    }

    /// The lincheck operation, on `key` (the key as the history names it).
    pub fn to_lincheck(&self, key: String) -> lincheck::kv::Op {
        match self {
            KvOp::Put { value, .. } => lincheck::kv::Op::put(key, value.clone()),
            KvOp::Get { .. } => lincheck::kv::Op::get(key),
            KvOp::Del { .. } => lincheck::kv::Op::delete(key),
        }
    }
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ended {
    /// It exited with this code.
    Exit(i32),
    /// A signal killed it.
    Signal(i32),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exit(c) => write!(f, "exit {c}"),
            Ended::Signal(s) => match Signal::try_from(*s) {
                Ok(sig) => write!(f, "killed by {}", sig.as_str()),
                Err(_) => write!(f, "killed by signal {s}"),
            },
        }
    }
}

/// How one process ran.
#[derive(Clone, Debug, Serialize)]
pub struct Ran {
    /// Its process id.
    pub pid: u32,
    /// When it was spawned (ns on the run's clock; read before spawning).
    pub invoke: u64,
    /// When it was seen to have ended (read after it exited, before it was reaped).
    pub complete: u64,
    /// How it ended.
    pub ended: Ended,
    /// What it printed on stdout (lossy UTF-8).
    pub stdout: String,
    /// What it printed on stderr (lossy UTF-8).
    pub stderr: String,
}

impl Ran {
    /// Wall time, ns.
    pub fn latency(&self) -> u64 {
        self.complete - self.invoke
    }
}

/// One operation of a loop, as it ran.
#[derive(Clone, Debug, Serialize)]
pub struct Invocation {
    /// The loop that ran it.
    pub client: u64,
    /// Its number within the loop.
    pub seq: u64,
    /// What it was asked to do.
    #[serde(flatten)]
    pub op: KvOp,
    /// How it ran.
    #[serde(flatten)]
    pub ran: Ran,
}

/// The process a loop is running, as the fault injector sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    /// Its pid.
    pub pid: u32,
    /// Its invocation's number within the loop.
    pub seq: u64,
    /// When it was spawned.
    pub invoke: u64,
}

/// A loop's running process. The slot is cleared (under its lock) after the process exited
/// and before it is reaped, so a signal sent while holding the lock to the pid found in the
/// slot always reaches that process (or its zombie), never a process that reused the pid.
#[derive(Debug, Default)]
pub struct Slot(Mutex<Option<Running>>);

impl Slot {
    /// The lock on the slot.
    pub fn lock(&self) -> MutexGuard<'_, Option<Running>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `signal` to the running process if it is invocation `seq` (any, if `None`);
    /// which process it reached.
    pub fn signal(&self, signal: Signal, seq: Option<u64>) -> Option<Running> {
        let guard = self.lock();
        let running = (*guard)?;
        if seq.is_some_and(|s| s != running.seq) {
            return None;
        }
        let pid = i32::try_from(running.pid).ok()?;
        kill(Pid::from_raw(pid), signal).ok()?;
        Some(running)
    }
}

/// Where the `kv` commands go.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The `patronus` binary.
    pub patronus: &'a Path,
    /// The memory node.
    pub addr: SocketAddr,
}

impl Target<'_> {
    /// Runs `patronus kv --connect ADDR ARGS` to completion, publishing its pid in `slot`
    /// (as invocation `seq`) while it runs.
    pub fn run(&self, args: &[String], seq: u64, clock: &Clock, slot: &Slot) -> io::Result<Ran> {
        let mut cmd = Command::new(self.patronus);
        cmd.args(["kv", "--connect", &self.addr.to_string()])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let (child, invoke) = {
            // Spawned under the slot's lock: the injector never misses a live process.
            let mut guard = slot.lock();
            let invoke = clock.now();
            let child = cmd.spawn()?;
            *guard = Some(Running {
                pid: child.id(),
                seq,
                invoke,
            });
            (child, invoke)
        };
        let pid = child.id();
        // Outputs are a line or two and fit in the pipes: waiting before reading is safe.
        let exited = wait_exited(pid);
        let complete = clock.now();
        *slot.lock() = None;
        let out = child.wait_with_output()?;
        exited?;
        let ended = match (out.status.code(), out.status.signal()) {
            (Some(code), _) => Ended::Exit(code),
            (None, Some(sig)) => Ended::Signal(sig),
            (None, None) => Ended::Exit(-1),
        };
        Ok(Ran {
            pid,
            invoke,
            complete,
            ended,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Waits until process `pid` (a child) has exited, leaving it unreaped (`WNOWAIT`).
pub fn wait_exited(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    loop {
        match waitid(
            Id::Pid(Pid::from_raw(pid)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
        ) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_become_kv_arguments_and_lincheck_ops() {
        let put = KvOp::Put {
            key: "k".into(),
            value: "v1.2".into(),
        };
        assert_eq!(put.args(), ["put", "k", "v1.2"]);
        assert_eq!(
            put.to_lincheck("e0:k".into()),
            lincheck::kv::Op::put("e0:k", "v1.2")
        );
        let get = KvOp::Get { key: "k".into() };
        assert_eq!(get.args(), ["get", "k", "--format", "hex"]);
        assert_eq!(KvOp::Del { key: "k".into() }.args(), ["del", "k"]);
        assert_eq!(Ended::Signal(9).to_string(), "killed by SIGKILL");
        assert_eq!(Ended::Exit(3).to_string(), "exit 3");
    }

    #[test]
    fn a_process_is_timed_and_its_slot_cleared() {
        let clock = Clock::start();
        let slot = Slot::default();
        // `false` stands in for `patronus`: it ignores its arguments and exits 1.
        let target = Target {
            patronus: Path::new("false"),
            addr: "127.0.0.1:1".parse().expect("an address"),
        };
        let inv = target.run(&[], 7, &clock, &slot).expect("sh runs");
        assert_eq!(inv.ended, Ended::Exit(1));
        assert!(inv.complete >= inv.invoke);
        assert!(slot.lock().is_none());
        assert_eq!(slot.signal(Signal::SIGKILL, None), None);
    }
}

//! The helper binary run in a host's namespace (`ip netns exec`, which execs it: the child's
//! pid is the helper's), with its output read line by line on a thread of its own.
//!
//! Every line the process prints goes to the CI log prefixed with its host and role, and to
//! a channel the test reads with deadlines. Dropping a [`Proc`] kills it (SIGKILL) and reaps
//! it, so no process outlives its test, whatever the outcome; a topology is declared before
//! its processes, so they are dropped (killed) before its namespaces are deleted.

use super::topology::Host;
use super::{log, now, pause};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// The helper binary of this crate.
pub const HELPER: &str = env!("CARGO_BIN_EXE_patronus-netns-client");

/// Why [`Proc::next_line`] returned no line.
#[derive(Debug, PartialEq, Eq)]
pub enum NoLine {
    /// None came within this long.
    TimedOut(Duration),
    /// The process closed its output (it ended).
    Ended,
}

/// A helper process in a namespace.
#[derive(Debug)]
pub struct Proc {
    /// `<test> <host>/<role>`, as in the log.
    pub tag: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Proc {
    /// Starts the helper with `args` in `host`'s namespace.
    pub fn spawn(host: &Host, role: &str, args: &[&str]) -> Proc {
        let tag = format!("{} {}/{role}", host.test, host.name);
        log(&format!(
            "[{tag}] ip netns exec {} patronus-netns-client {}",
            host.ns,
            args.join(" ")
        ));
        let mut child = match Command::new("ip")
            .args(["netns", "exec", &host.ns, HELPER])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => panic!("[{tag}] spawning: {e}"),
        };
        let (tx, lines) = channel();
        let streams: [(Box<dyn std::io::Read + Send>, &str); 2] = [
            (Box::new(child.stdout.take().expect("piped stdout")), ""),
            (
                Box::new(child.stderr.take().expect("piped stderr")),
                "stderr: ",
            ),
        ];
        for (stream, what) in streams {
            let (tx, tag, what) = (tx.clone(), tag.clone(), what.to_string());
            std::thread::Builder::new()
                .name(format!("{tag} {what}"))
                .spawn(move || {
                    for line in BufReader::new(stream).lines() {
                        let Ok(line) = line else { break };
                        log(&format!("[{tag}] {what}{line}"));
                        if tx.send(format!("{what}{line}")).is_err() {
                            break;
                        }
                    }
                })
                .expect("spawning an output reader");
        }
        let stdin = child.stdin.take();
        Proc {
            tag,
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// The process id (the helper's: `ip netns exec` execs it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most `within`) for a line starting with `prefix`; returns it. Panics with
    /// everything seen if none comes, or if the process ends first.
    pub fn expect_line(&mut self, prefix: &str, within: Duration) -> String {
        match self.next_line(|l| l.starts_with(prefix), within) {
            Ok(l) => l,
            Err(why) => panic!(
                "[{}] no line starting with {prefix:?} ({why:?}); seen:\n{}",
                self.tag,
                self.seen.join("\n")
            ),
        }
    }

    /// The next line matching `want` within `within`; `Err` says why not.
    pub fn next_line(
        &mut self,
        want: impl Fn(&str) -> bool,
        within: Duration,
    ) -> Result<String, NoLine> {
        let deadline = now() + within;
        loop {
            let left = deadline.saturating_duration_since(now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Err(NoLine::TimedOut(within)),
                Err(RecvTimeoutError::Disconnected) => return Err(NoLine::Ended),
            }
        }
    }

    /// Writes `line` to the process's stdin.
    pub fn send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    /// Waits (at most `within`) for the process to exit and for all its output; returns its
    /// status and every line it printed. Panics if it is still running then.
    pub fn finish(&mut self, within: Duration) -> (ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        self.collect(within)
    }

    /// As [`Proc::finish`], with stdin left open (so the exit is the signal's doing).
    fn collect(&mut self, within: Duration) -> (ExitStatus, Vec<String>) {
        let deadline = now() + within;
        while self.next_line(|_| false, Duration::from_millis(50)) != Err(NoLine::Ended) {
            if now() > deadline {
                panic!(
                    "[{}] still running after {within:?}; seen:\n{}",
                    self.tag,
                    self.seen.join("\n")
                );
            }
        }
        let status = self.wait_exit(deadline);
        log(&format!("[{}] exited: {status}", self.tag));
        (status, self.seen.clone())
    }

    /// Polls (until `deadline`, then kills) for the process's exit.
    fn wait_exit(&mut self, deadline: std::time::Instant) -> ExitStatus {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if now() < deadline => pause(),
                _ => {
                    let _ = self.child.kill();
                    match self.child.wait() {
                        Ok(s) => return s,
                        Err(e) => panic!("[{}] reaping: {e}", self.tag),
                    }
                }
            }
        }
    }

    /// Takes the lines printed so far without waiting, into [`Proc::seen`].
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, then reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        let _ = self.child.kill();
        let status = self.wait_exit(now() + Duration::from_secs(10));
        log(&format!("[{}] killed (SIGKILL): {status}", self.tag));
        status
    }

    /// SIGTERM, then waits (at most `within`) for it to exit and for its last lines.
    pub fn terminate(&mut self, within: Duration) -> (ExitStatus, Vec<String>) {
        let pid = Pid::from_raw(i32::try_from(self.pid()).expect("a pid fits in i32"));
        if let Err(e) = kill(pid, Signal::SIGTERM) {
            panic!("[{}] SIGTERM: {e}", self.tag);
        }
        self.collect(within)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            self.kill();
        }
    }
}

/// Runs the helper to completion in `host`'s namespace (at most `within`).
pub fn run(host: &Host, role: &str, args: &[&str], within: Duration) -> (ExitStatus, Vec<String>) {
    Proc::spawn(host, role, args).finish(within)
}

/// The value of the word `key=VALUE` in `line`.
pub fn field<'l>(line: &'l str, key: &str) -> Option<&'l str> {
    let pat = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(pat.as_str()))
}

/// `key=` of `line` as a number; panics with the line if missing.
pub fn number(line: &str, key: &str) -> u64 {
    field(line, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key}= in {line:?}"))
}

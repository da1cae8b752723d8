//! Servers in processes of their own (a `redis-server`, a `patronus serve`): started pinned to
//! a core with `taskset` when it is there, ready once a line of their standard output says so,
//! measured by the CPU time of all their threads, and killed when dropped.
//!
//! Invariants: a child is never left running (drop kills and reaps it); waiting for readiness
//! is bounded, and a child that exits or stays silent is reported with the end of what it
//! printed.

use anyhow::{Context as _, Result, bail};
use std::io::{BufRead, BufReader, Read as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running child process.
#[derive(Debug)]
pub struct ServerProcess {
    name: String,
    child: Child,
    /// Kept open: a `patronus serve` serves until its standard input closes.
    _stdin: Option<ChildStdin>,
    /// The core it is pinned to, if pinning worked.
    pinned: Option<usize>,
}

/// How long a child may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

impl ServerProcess {
    /// Starts `program args` (on `core` if given and `taskset` is installed) and reads its
    /// standard output until `ready` recognises a line; returns the process and what `ready`
    /// made of the line. The rest of its output is drained on a thread of its own.
    pub fn start<T: Send + 'static>(
        program: &str,
        args: &[String],
        core: Option<usize>,
        ready: impl Fn(&str) -> Option<T> + Send + 'static,
    ) -> Result<(Self, T)> {
        Self::start_with_env(program, args, &[], core, ready)
    }

    /// [`ServerProcess::start`] with `env` added to the child's environment.
    pub fn start_with_env<T: Send + 'static>(
        program: &str,
        args: &[String],
        env: &[(&str, &str)],
        core: Option<usize>,
        ready: impl Fn(&str) -> Option<T> + Send + 'static,
    ) -> Result<(Self, T)> {
        let pin = core.filter(|_| which("taskset"));
        let mut cmd = match pin {
            Some(c) => {
                let mut cmd = Command::new("taskset");
                cmd.arg("-c").arg(c.to_string()).arg(program);
                cmd
            }
            None => Command::new(program),
        };
        let mut child = cmd
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let name = program.rsplit('/').next().unwrap_or(program).to_string();
        let stdout = child.stdout.take().context("child without stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("{name}-stdout"))
            .spawn(move || {
                let mut told = false;
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if !told && let Some(v) = ready(&line) {
                        told = true;
                        let _ = tx.send(Ok(v));
                    } else if !told {
                        let _ = tx.send(Err(line));
                    }
                }
            })?;
        let stdin = child.stdin.take();
        let mut me = ServerProcess {
            name,
            child,
            _stdin: stdin,
            pinned: pin,
        };
        let mut said = Vec::new();
        loop {
            match rx.recv_timeout(READY_WITHIN) {
                Ok(Ok(v)) => return Ok((me, v)),
                Ok(Err(line)) => said.push(line),
                Err(_) => {
                    let status = me.child.try_wait().ok().flatten();
                    let mut err = String::new();
                    if let Some(mut e) = me.child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    let tail = said.iter().rev().take(5).rev().cloned().collect::<Vec<_>>();
                    bail!(
                        "{} did not say it was ready (exit: {status:?}); it printed {tail:?}, stderr {:?}",
                        me.name,
                        err.lines().rev().take(5).collect::<Vec<_>>()
                    );
                }
            }
        }
    }

    /// The child's operating-system process id (for /proc statistics).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The core it runs on, if it was pinned.
    pub fn pinned(&self) -> Option<usize> {
        self.pinned
    }

    /// CPU time all its threads have used so far (their scheduler statistics, ns).
    pub fn cpu_time(&self) -> Result<Duration> {
        process_cpu_of(self.pid())
    }

    /// CPU time used by the process's threads whose name starts with `prefix`, and by the
    /// others.
    pub fn cpu_split(&self, prefix: &str) -> Result<(Duration, Duration)> {
        process_cpu_split(self.pid(), prefix)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time used by every thread of process `pid`, from `/proc/<pid>/task/*/schedstat`.
pub fn process_cpu_of(pid: u32) -> Result<Duration> {
    let (a, b) = process_cpu_split(pid, "")?;
    Ok(a + b)
}

/// CPU time used by the threads of process `pid` whose name (`comm`) starts with `prefix`,
/// and by the others, from `/proc/<pid>/task/*/{comm,schedstat}`.
pub fn process_cpu_split(pid: u32, prefix: &str) -> Result<(Duration, Duration)> {
    let (mut matching, mut rest) = (0u64, 0u64);
    let dir = format!("/proc/{pid}/task");
    for task in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let task = task?.path();
        let path = task.join("schedstat");
        // A thread that exited meanwhile has nothing more to add.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let on_cpu = text.split_whitespace().next().unwrap_or("0");
        let ns = on_cpu
            .parse::<u64>()
            .with_context(|| format!("{}: {text:?}", path.display()))?;
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            matching += ns;
        } else {
            rest += ns;
        }
    }
    Ok((Duration::from_nanos(matching), Duration::from_nanos(rest)))
}

/// The core a benchmark pins its servers to (`redis-server`, `patronus serve`, the floor's
/// peer); its client threads get the other one.
pub const SERVER_CORE: usize = 1;

/// The calling thread's CPU affinity, restored when dropped.
#[derive(Debug)]
pub struct Pinned {
    before: Option<nix::sched::CpuSet>,
}

/// Pins the calling thread (and the threads it spawns from now on) to `core` until the guard
/// is dropped; does nothing where the core does not exist or affinity cannot be set. A
/// measurement pins its client to the core its server does not have, so the result does
/// not depend on where the scheduler put the two ends.
pub fn pin_this_thread(core: usize) -> Pinned {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;
    let me = Pid::from_raw(0);
    let Ok(before) = sched_getaffinity(me) else {
        return Pinned { before: None };
    };
    let mut only = CpuSet::new();
    let set = only.set(core).is_ok()
        && before.is_set(core).unwrap_or(false)
        && sched_setaffinity(me, &only).is_ok();
    Pinned {
        before: set.then_some(before),
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), before);
        }
    }
}

/// The program `name` of this build: the running program if it is `name`, else `name` in the
/// running program's folder (`patronus-bench` and `patronus` build into the same one).
pub fn program_beside(name: &str) -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    if exe.file_name().is_some_and(|n| n == file.as_str()) {
        return Some(exe);
    }
    Some(exe.with_file_name(file)).filter(|p| p.is_file())
}

/// Whether `program` is on the `PATH`.
pub fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_ready_on_its_line_and_measured() {
        let script = "echo starting; echo ready 42; exec cat".to_string();
        let (p, n) = ServerProcess::start("sh", &["-c".into(), script], Some(0), |line| {
            line.strip_prefix("ready ")?.parse::<u32>().ok()
        })
        .unwrap();
        assert_eq!(n, 42);
        assert!(p.cpu_time().unwrap() < Duration::from_secs(5));
    }

    #[test]
    fn a_child_that_exits_unready_is_reported() {
        let err = ServerProcess::start("sh", &["-c".into(), "echo nope".into()], None, |l| {
            l.strip_prefix("ready").map(|_| ())
        })
        .unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}

//! One scenario run: a node, the loops, the faults (or the burners), then the history checked.

use crate::classify::{self, Classified, classify};
use crate::clock::{Clock, Stop, secs};
pub use crate::config::{Config, Mode};
use crate::faults::{Fault, Planned, plan};
use crate::history::{self, EpochSpan, FinalScan};
use crate::invoke::{Ended, Invocation, KvOp, Ran, Slot, Target};
pub use crate::record::{Epoch, FaultEvent, Files};
use crate::report::{self, Findings};
use crate::serve::{Node, free_port};
use crate::workload::{Loop, Role, Workload};
use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;
use serde::Serialize;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::collections::HashSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::ScopedJoinHandle;

/// A command the scenario itself ran (create, scan), not part of the workload.
#[derive(Clone, Debug, Serialize)]
pub struct Control {
    /// What (`create`, `scan`).
    pub what: String,
    /// How it ran.
    #[serde(flatten)]
    pub ran: Ran,
}

/// What the threads share.
struct Shared<'a> {
    config: &'a Config,
    clock: Clock,
    target: Target<'a>,
    workload: Workload,
    slots: Vec<Slot>,
    /// Raised when the loops should stop after their current invocation.
    loops_stop: Stop,
    /// Raised when the run cannot go on (a loop could not spawn, the node would not start).
    abort: Stop,
    abort_why: Locked<Vec<String>>,
    invocations: Locked<Vec<Invocation>>,
    node: Locked<Option<Node>>,
    epochs: Locked<Vec<Epoch>>,
    faults: Locked<Vec<FaultEvent>>,
    controls: Locked<Vec<Control>>,
    /// Invocations (loop, seq) the scenario killed: SIGKILL faults and the hang watchdog.
    killed: Locked<HashSet<(u64, u64)>>,
    hung: Locked<Vec<String>>,
}

#[derive(Debug, Default)]
struct Locked<T>(Mutex<T>);

impl<T> Locked<T> {
    fn new(t: T) -> Self {
        Locked(Mutex::new(t))
    }
    fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Shared<'_> {
    fn abort(&self, why: String) {
        eprintln!("scenario: {why}");
        self.abort_why.lock().push(why);
        self.abort.raise();
    }

    fn log_fault(&self, fault: Fault, hit: bool, what: String) {
        let at = self.clock.now();
        println!("  {:>10}  {fault}: {what}", secs(at));
        self.faults.lock().push(FaultEvent {
            at,
            fault,
            what,
            hit,
        });
    }

    fn control(&self, what: &str, args: &[String]) -> Result<Ran> {
        let slot = Slot::default();
        let ran = self.target.run(args, 0, &self.clock, &slot)?;
        self.controls.lock().push(Control {
            what: what.to_string(),
            ran: ran.clone(),
        });
        Ok(ran)
    }

    /// Starts node `index` and creates its table.
    fn start_node(&self, index: usize) -> Result<()> {
        let c = self.config;
        let node = Node::start(
            &c.patronus,
            self.target.addr,
            c.admin,
            c.pool_mib,
            &c.out,
            index,
            &self.clock,
        )?;
        let mut epoch = Epoch {
            pid: node.pid(),
            spawned: node.spawned,
            ready: node.ready,
            ..Epoch::default()
        };
        *self.node.lock() = Some(node);
        let mut args = vec!["create".to_string()];
        args.extend(c.shape.iter().cloned());
        let mut tries = Vec::new();
        // A new node answers at once; a few tries cover a create cut by a loaded machine.
        for _ in 0..5 {
            let ran = self.control("create", &args)?;
            if ran.ended == Ended::Exit(classify::EXIT_OK) {
                epoch.table = Some(ran.complete);
                break;
            }
            tries.push(format!("{}: {}", ran.ended, ran.stderr.trim()));
        }
        let created = epoch.table.is_some();
        self.epochs.lock().push(epoch);
        if !created {
            bail!("node {index}: `kv create` failed: {}", tries.join("; "));
        }
        Ok(())
    }
}

/// Runs the scenario; the findings (its report is printed and written).
pub fn run(config: &Config) -> Result<Findings> {
    std::fs::create_dir_all(&config.out)
        .with_context(|| format!("creating {}", config.out.display()))?;
    if !config.patronus.is_file() {
        bail!(
            "no patronus binary at {} (build it: cargo build --release -p patronus-cli, or give \
             --patronus PATH)",
            config.patronus.display()
        );
    }
    let addr = free_port(config.seed)?;
    let clock = Clock::start();
    let shared = Shared {
        config,
        clock,
        target: Target {
            patronus: &config.patronus,
            addr,
        },
        workload: Workload::new(config.keys),
        slots: (0..config.loops).map(|_| Slot::default()).collect(),
        loops_stop: Stop::default(),
        abort: Stop::default(),
        abort_why: Locked::new(Vec::new()),
        invocations: Locked::new(Vec::new()),
        node: Locked::new(None),
        epochs: Locked::new(Vec::new()),
        faults: Locked::new(Vec::new()),
        controls: Locked::new(Vec::new()),
        killed: Locked::new(HashSet::new()),
        hung: Locked::new(Vec::new()),
    };
    let planned = match config.mode {
        Mode::Faults => plan(
            config.seed,
            config.duration.as_millis() as u64,
            config.loops as u64,
        ),
        Mode::Busy => Vec::new(),
    };
    // SIGINT, SIGTERM or SIGHUP end the run early, as an abort does: the loops finish their
    // invocations, the burners and the node are stopped, and no child outlives the run.
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing signal handlers")?;
    let signals_handle = signals.handle();
    report::print_header(config, addr, &planned);
    shared.start_node(0)?;
    let mut burners = Burners::start(config.burners)?;
    let load_before = report::loadavg();
    let started = clock.now();
    let done = Stop::default();
    let load = std::thread::scope(|s| -> Result<Vec<f64>> {
        // Ends the signal thread however this closure returns (the scope joins it after).
        let _close = CloseOnDrop(signals_handle.clone());
        let interrupts = {
            let shared = &shared;
            std::thread::Builder::new()
                .name("signals".into())
                .spawn_scoped(s, move || {
                    for signal in signals.forever() {
                        shared.abort(format!("interrupted by signal {signal}: stopping"));
                    }
                })?
        };
        let loops: Vec<ScopedJoinHandle<'_, ()>> = (0..config.loops)
            .map(|i| {
                let role = if i < config.loops - config.inserters {
                    Role::Hot
                } else {
                    Role::Inserter
                };
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("loop-{i}"))
                    .spawn_scoped(s, move || run_loop(shared, i, role))
            })
            .collect::<Result<_, _>>()?;
        let injector = std::thread::Builder::new()
            .name("injector".into())
            .spawn_scoped(s, || inject(&shared, started, &planned))?;
        let monitor = std::thread::Builder::new()
            .name("monitor".into())
            .spawn_scoped(s, || monitor(&shared, started, &done))?;
        if let Some(admin) = config.admin {
            let (shared, done) = (&shared, &done);
            std::thread::Builder::new()
                .name("status".into())
                .spawn_scoped(s, move || sample_status(shared, admin, started, done))?;
        }
        // The run's time (or until it cannot go on), then the faults' tail (the injector
        // returns once every stopped process was continued and the node is up), then the
        // loops' last invocations.
        shared
            .abort
            .wait_until(&clock, started + config.duration.as_nanos() as u64);
        let injected = injector.join();
        shared.loops_stop.raise();
        let looped: Vec<_> = loops.into_iter().map(|l| l.join()).collect();
        done.raise();
        signals_handle.close();
        let _ = interrupts.join();
        let load = monitor.join();
        if injected.is_err() || looped.iter().any(Result::is_err) {
            bail!("a scenario thread panicked");
        }
        load.map_err(|_| anyhow::anyhow!("the monitor thread panicked"))
    })?;
    let ran_for = clock.now() - started;
    burners.stop();
    // Quiescent now: one scan reads every key of the last epoch.
    let scan = final_scan(&shared);
    let node = shared.node.lock().take();
    if let Some(node) = node {
        let signalled = clock.now();
        let (reaped, how) = node.end(Signal::SIGTERM, &clock)?;
        if let Some(e) = shared.epochs.lock().last_mut() {
            e.signalled = Some(signalled);
            e.reaped = Some(reaped);
            e.how = Some(format!("SIGTERM at the end: {how}"));
        }
    }
    let aborted = shared.abort_why.lock().clone();
    let Shared {
        invocations,
        epochs,
        faults,
        controls,
        killed,
        hung,
        ..
    } = shared;
    let mut invocations = invocations.into_inner();
    invocations.sort_by_key(|i| (i.ran.invoke, i.client));
    let epochs = epochs.into_inner();
    let killed = killed.into_inner();
    let classes: Vec<Classified> = invocations
        .iter()
        .map(|i| {
            let mut c = classify(&i.op, i.ran.ended, &i.ran.stdout, &i.ran.stderr);
            if let Ended::Signal(sig) = i.ran.ended {
                if !killed.contains(&(i.client, i.seq)) {
                    c.anomaly = Some(format!(
                        "{} {} was {} by no fault of the scenario's",
                        i.op.name(),
                        i.op.key(),
                        Ended::Signal(sig)
                    ));
                }
            }
            c
        })
        .collect();
    let spans: Vec<EpochSpan> = epochs
        .iter()
        .map(|e| EpochSpan {
            spawned: e.spawned,
            reaped: e.reaped,
            table: e.table,
        })
        .collect();
    let (scan, scan_problem) = match scan {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(format!("the final scan failed: {e:#}"))),
    };
    let built = history::build(&spans, &invocations, &classes, scan.as_ref());
    let faults = faults.into_inner();
    let files = write_files(
        config,
        &invocations,
        &classes,
        &epochs,
        &faults,
        &controls.into_inner(),
        &built.history,
    )?;
    let findings = report::report(report::Inputs {
        config,
        ran_for,
        invocations: &invocations,
        classes: &classes,
        epochs: &epochs,
        faults: &faults,
        built,
        scan: scan.as_ref(),
        scan_problem,
        hung: hung.into_inner(),
        aborted,
        load_before,
        load,
        files,
    })?;
    Ok(findings)
}

/// Closes a signal iterator's handle when dropped, so the thread reading it ends.
struct CloseOnDrop(signal_hook::iterator::Handle);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// One loop: invocations back to back until told to stop.
fn run_loop(shared: &Shared<'_>, i: usize, role: Role) {
    let mut lp = Loop::new(i as u64, role, shared.config.seed);
    while !shared.loops_stop.is_raised() && !shared.abort.is_raised() {
        let (seq, op) = lp.next(&shared.workload);
        let ran = match shared
            .target
            .run(&op.args(), seq, &shared.clock, &shared.slots[i])
        {
            Ok(ran) => ran,
            Err(e) => {
                shared.abort(format!("loop {i}: cannot run patronus kv: {e}"));
                return;
            }
        };
        if let (Role::Inserter, KvOp::Put { key, .. }) = (role, &op) {
            if ran.ended == Ended::Exit(0) && ran.stdout.trim() == "inserted" {
                shared.workload.acknowledged(key);
            }
        }
        shared.invocations.lock().push(Invocation {
            client: i as u64,
            seq,
            op,
            ran,
        });
    }
}

/// Every second until `done`: the hang watchdog; every 5 s: the load average. The samples.
fn monitor(shared: &Shared<'_>, started: u64, done: &Stop) -> Vec<f64> {
    let mut load = Vec::new();
    let mut tick = started;
    loop {
        tick += 1_000_000_000;
        if done.wait_until(&shared.clock, tick) {
            return load;
        }
        watchdog(shared);
        if (tick - started) % 5_000_000_000 == 0 {
            load.extend(report::loadavg());
        }
    }
}

/// Every 5 s until `done`: `patronus status --json ADMIN`, appended to `status.jsonl` as
/// `{"at": NS, "status": …}` (or `"error"`: the node may be down or stopped).
fn sample_status(shared: &Shared<'_>, admin: SocketAddr, started: u64, done: &Stop) {
    let path = shared.config.out.join("status.jsonl");
    let Ok(mut file) = std::fs::File::create(&path) else {
        eprintln!("scenario: cannot create {}", path.display());
        return;
    };
    let mut tick = started;
    loop {
        tick += 5_000_000_000;
        if done.wait_until(&shared.clock, tick) {
            return;
        }
        let at = shared.clock.now();
        let out = Command::new(&shared.config.patronus)
            .args(["status", "--json", &admin.to_string()])
            .stdin(Stdio::null())
            .output();
        let line = match out {
            Ok(o) if o.status.success() => {
                match serde_json::from_slice::<serde_json::Value>(&o.stdout) {
                    Ok(status) => serde_json::json!({ "at": at, "status": status }),
                    Err(e) => serde_json::json!({ "at": at, "error": e.to_string() }),
                }
            }
            Ok(o) => serde_json::json!({
                "at": at,
                "error": String::from_utf8_lossy(&o.stderr).trim().to_string(),
            }),
            Err(e) => serde_json::json!({ "at": at, "error": e.to_string() }),
        };
        let _ = writeln!(file, "{line}");
    }
}

/// Kills invocations that ran longer than the hang limit.
fn watchdog(shared: &Shared<'_>) {
    let now = shared.clock.now();
    let limit = shared.config.hang.as_nanos() as u64;
    for (i, slot) in shared.slots.iter().enumerate() {
        let running = *slot.lock();
        if let Some(r) = running.filter(|r| overdue(now, r.invoke, limit)) {
            if slot.signal(Signal::SIGKILL, Some(r.seq)).is_some() {
                shared.killed.lock().insert((i as u64, r.seq));
                let what = format!(
                    "loop {i} invocation {} (pid {}) ran {} and was killed",
                    r.seq,
                    r.pid,
                    secs(now.saturating_sub(r.invoke))
                );
                eprintln!("scenario: hung: {what}");
                shared.hung.lock().push(what);
            }
        }
    }
}

/// Whether an invocation spawned at `invoke` has run longer than `limit` at `now` (which may
/// have been read before it was spawned).
fn overdue(now: u64, invoke: u64, limit: u64) -> bool {
    now.saturating_sub(invoke) > limit
}

/// A scheduled action of the injector.
#[derive(Clone, Copy, Debug)]
enum Action {
    Fault(Fault),
    ContKv { target: usize, seq: u64, since: u64 },
    ContServe { since: u64 },
    Respawn { index: usize },
}

/// Carries out the fault schedule (times relative to `started`, paused while the node is
/// ended or started), then every action it leads to (continues, respawns), so that when it
/// returns no process is stopped and the node is up.
fn inject(shared: &Shared<'_>, started: u64, planned: &[Planned]) {
    let clock = &shared.clock;
    let mut actions: Vec<(u64, Action)> = planned
        .iter()
        .map(|p| (started + p.at_ms * 1_000_000, Action::Fault(p.fault)))
        .collect();
    while let Some(next) = (0..actions.len()).min_by_key(|&i| actions[i].0) {
        let (at, action) = actions.remove(next);
        if shared.abort.is_raised() && matches!(action, Action::Fault(_)) {
            continue;
        }
        if let Action::Fault(_) = action {
            shared.abort.wait_until(clock, at);
            if shared.abort.is_raised() {
                continue;
            }
        } else {
            // Undoing a fault is never skipped, only brought forward by an abort.
            shared.abort.wait_until(clock, at);
        }
        let now = clock.now();
        let blocking = matches!(
            action,
            Action::Respawn { .. } | Action::Fault(Fault::RestartServe { .. })
        );
        match action {
            Action::Fault(f @ Fault::KillKv { target }) => {
                let slot = &shared.slots[target as usize];
                // Noted as killed before the signal: its loop may record it at once.
                let running = *slot.lock();
                if let Some(r) = running {
                    shared.killed.lock().insert((target, r.seq));
                }
                match slot.signal(Signal::SIGKILL, running.map(|r| r.seq)) {
                    Some(r) => shared.log_fault(
                        f,
                        true,
                        format!(
                            "pid {} (invocation {}, running {})",
                            r.pid,
                            r.seq,
                            secs(now.saturating_sub(r.invoke))
                        ),
                    ),
                    None => shared.log_fault(f, false, "no process running".into()),
                }
            }
            Action::Fault(f @ Fault::StopKv { target, ms }) => {
                match shared.slots[target as usize].signal(Signal::SIGSTOP, None) {
                    Some(r) => {
                        shared.log_fault(f, true, format!("pid {} (invocation {})", r.pid, r.seq));
                        actions.push((
                            now + ms * 1_000_000,
                            Action::ContKv {
                                target: target as usize,
                                seq: r.seq,
                                since: now,
                            },
                        ));
                    }
                    None => shared.log_fault(f, false, "no process running".into()),
                }
            }
            Action::ContKv { target, seq, since } => {
                let reached = shared.slots[target].signal(Signal::SIGCONT, Some(seq));
                println!(
                    "  {:>10}  SIGCONT kv loop {target} invocation {seq} after {}{}",
                    secs(now),
                    secs(now - since),
                    if reached.is_some() { "" } else { " (gone)" }
                );
            }
            Action::Fault(f @ Fault::StopServe { ms }) => {
                let node = shared.node.lock();
                match node.as_ref().map(|n| (n.pid(), n.signal(Signal::SIGSTOP))) {
                    Some((pid, Ok(()))) => {
                        shared.log_fault(f, true, format!("pid {pid}"));
                        actions.push((now + ms * 1_000_000, Action::ContServe { since: now }));
                    }
                    Some((_, Err(e))) => shared.log_fault(f, false, format!("{e:#}")),
                    None => shared.log_fault(f, false, "the node is down".into()),
                }
            }
            Action::ContServe { since } => {
                let node = shared.node.lock();
                if let Some(n) = node.as_ref() {
                    let r = n.signal(Signal::SIGCONT);
                    println!(
                        "  {:>10}  SIGCONT serve after {}{}",
                        secs(now),
                        secs(now - since),
                        r.err().map(|e| format!(": {e:#}")).unwrap_or_default()
                    );
                }
            }
            Action::Fault(f @ Fault::RestartServe { crash, down_ms }) => {
                let node = shared.node.lock().take();
                let Some(node) = node else {
                    shared.log_fault(f, false, "the node is down".into());
                    continue;
                };
                let index = node.index;
                let pid = node.pid();
                let signal = if crash {
                    Signal::SIGKILL
                } else {
                    Signal::SIGTERM
                };
                match node.end(signal, clock) {
                    Ok((reaped, how)) => {
                        if let Some(e) = shared.epochs.lock().last_mut() {
                            e.signalled = Some(now);
                            e.reaped = Some(reaped);
                            e.how = Some(format!("{signal}: {how}"));
                        }
                        shared.workload.forget();
                        shared.log_fault(
                            f,
                            true,
                            format!(
                                "node {index} (pid {pid}) {signal}, reaped after {} ({how})",
                                secs(reaped - now)
                            ),
                        );
                        actions.push((
                            reaped + down_ms * 1_000_000,
                            Action::Respawn { index: index + 1 },
                        ));
                    }
                    Err(e) => shared.abort(format!("ending node {index}: {e:#}")),
                }
            }
            Action::Respawn { index } => match shared.start_node(index) {
                Ok(()) => {
                    let epochs = shared.epochs.lock();
                    if let Some(e) = epochs.last() {
                        println!(
                            "  {:>10}  node {index} (pid {}) ready after {}, table created \
                             after {}",
                            secs(e.ready),
                            e.pid,
                            secs(e.ready - e.spawned),
                            secs(e.table.unwrap_or(e.ready) - e.ready)
                        );
                    }
                }
                Err(e) => shared.abort(format!("starting node {index}: {e:#}")),
            },
        }
        if blocking {
            // The schedule waits while the node is ended or started (a drain, a start on a
            // loaded machine can take seconds): the faults keep their spacing.
            let took = clock.now() - now;
            for (t, a) in &mut actions {
                if let Action::Fault(_) = a {
                    *t += took;
                }
            }
        }
    }
}

/// `kv scan --format hex` on the last node, once the loops have stopped.
fn final_scan(shared: &Shared<'_>) -> Result<FinalScan> {
    let epoch = shared.epochs.lock().len().saturating_sub(1);
    if shared.node.lock().is_none() {
        bail!("the node is down");
    }
    let args = ["scan".to_string(), "--format".into(), "hex".into()];
    let ran = shared.control("scan", &args)?;
    if ran.ended != Ended::Exit(0) {
        bail!("{}: {}", ran.ended, ran.stderr.trim());
    }
    let pairs = classify::parse_scan(&ran.stdout).map_err(anyhow::Error::msg)?;
    Ok(FinalScan {
        epoch,
        invoke: ran.invoke,
        complete: ran.complete,
        pairs,
    })
}

#[derive(Serialize)]
struct InvocationLine<'a> {
    #[serde(flatten)]
    invocation: &'a Invocation,
    result: String,
    anomaly: Option<&'a str>,
}

fn write_files(
    config: &Config,
    invocations: &[Invocation],
    classes: &[Classified],
    epochs: &[Epoch],
    faults: &[FaultEvent],
    controls: &[Control],
    history: &lincheck::kv::History,
) -> Result<Files> {
    let dir = config.out.clone();
    let files = Files {
        history: dir.join("history.jsonl"),
        invocations: dir.join("invocations.jsonl"),
        events: dir.join("events.json"),
        dir,
    };
    history
        .write_jsonl(&files.history)
        .context("writing the history")?;
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&files.invocations).context("creating invocations.jsonl")?,
    );
    for (invocation, class) in invocations.iter().zip(classes) {
        let line = InvocationLine {
            invocation,
            result: match &class.status {
                lincheck::Status::Done(o) => serde_json::to_value(o)
                    .ok()
                    .and_then(|v| v.get("result").and_then(|r| r.as_str()).map(String::from))
                    .unwrap_or_default(),
                lincheck::Status::Unknown => "unknown".into(),
                lincheck::Status::Failed => "failed".into(),
            },
            anomaly: class.anomaly.as_deref(),
        };
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    let events = serde_json::json!({
        "seed": config.seed,
        "epochs": epochs,
        "faults": faults,
        "controls": controls,
    });
    std::fs::write(&files.events, serde_json::to_string_pretty(&events)?)?;
    Ok(files)
}

/// CPU-burning processes: this binary's hidden `burn` command, each spinning until stopped
/// (or until this process is gone).
struct Burners(Vec<Child>);

impl Burners {
    fn start(n: usize) -> Result<Burners> {
        let exe = std::env::current_exe().context("this binary's path")?;
        let mut burners = Burners(Vec::new());
        for _ in 0..n {
            burners.0.push(
                Command::new(&exe)
                    .arg("burn")
                    .stdin(Stdio::null())
                    .spawn()
                    .context("spawning a burner")?,
            );
        }
        Ok(burners)
    }

    fn stop(&mut self) {
        for mut c in self.0.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Spins until the parent process is gone (the `burn` command).
pub fn burn() {
    let parent = std::os::unix::process::parent_id();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    loop {
        for _ in 0..10_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if std::os::unix::process::parent_id() != parent {
            std::hint::black_box(x);
            return;
        }
    }
}

/// `kv create` arguments of the table: issue 25's shape that splits continuously
/// (`--initial-depth 0 --groups 1 --slots 2 --max-depth 14`: six slots per subtable), or
/// `kv create`'s defaults.
pub fn shape_args(split: bool) -> Vec<String> {
    if !split {
        return Vec::new();
    }
    [
        "--initial-depth",
        "0",
        "--groups",
        "1",
        "--slots",
        "2",
        "--max-depth",
        "14",
    ]
    .map(String::from)
    .to_vec()
}

/// The default `patronus` binary: next to this one (both built into one target directory),
/// else `target/release/patronus`.
pub fn default_patronus() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("patronus")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| Path::new("target/release/patronus").to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invocation_spawned_after_the_clock_was_read_is_not_overdue() {
        assert!(!overdue(100, 150, 10));
        assert!(!overdue(160, 150, 10));
        assert!(overdue(161, 150, 10));
    }
}

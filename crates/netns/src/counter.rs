//! `faa-loop`: a counter incremented one fetch-and-add at a time while the tests cut the
//! link, counting what the client library says of each FAA.
//!
//! Each FAA ends one of three ways: `Ok` (applied exactly once: S), `OutcomeUnknown` (the QP
//! broke and the FAA may or may not have run; it is never sent again: U), or another error
//! that says it was not run (refused locally, no QP to post it on, session lost: F). So at
//! any time the counter's value V satisfies S ≤ V ≤ S + U: nothing acknowledged is lost and
//! nothing is applied twice. Reads interleaved with the FAAs check that bound as they go.

use crate::{connect, ms_since, now};
use anyhow::{Context as _, Result};
use patronus_core::{Access, Client, ClientError, Mode, Perm};
use rnic::soft::SoftProvider;
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Arguments of `faa-loop`.
#[derive(clap::Args, Debug)]
pub struct FaaLoopArgs {
    /// The memory node.
    #[arg(long)]
    connect: SocketAddr,
    /// Name to publish the counter under.
    #[arg(long)]
    name: String,
    /// Lease of the counter's permission, ms (below the node's maximum lifetime).
    #[arg(long, default_value_t = 20_000)]
    lease_ms: u64,
    /// Stop by itself after this long, ms, if not told `stop` before.
    #[arg(long, default_value_t = 60_000)]
    deadline_ms: u64,
    /// Print `progress` every this many applied FAAs.
    #[arg(long, default_value_t = 25)]
    every: u64,
}

/// What the loop counted.
#[derive(Debug, Default)]
struct Counts {
    /// FAAs acknowledged (applied once).
    ok: u64,
    /// FAAs whose outcome is unknown.
    unknown: u64,
    /// FAAs known not to have run.
    failed: u64,
    /// Reads that succeeded, and that failed (retried by the next one).
    reads_ok: u64,
    reads_failed: u64,
    /// Reads whose value was outside [ok, ok + unknown]: must stay 0.
    violations: u64,
    /// The counter's permission acquired again (session lost, lease ended).
    reacquired: u64,
}

/// Runs the loop until `stop` (or end of file) on stdin or the deadline, then prints
/// `result ok=S unknown=U failed=F value=V ...` with the value read after the last FAA.
pub fn faa_loop(a: &FaaLoopArgs) -> Result<()> {
    let start = now();
    let deadline = start + Duration::from_millis(a.deadline_ms);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                match line {
                    Ok(l) if l.trim() != "stop" => continue,
                    _ => break,
                }
            }
            flag.store(true, Ordering::SeqCst);
        })
        .context("spawning the stdin reader")?;

    let (_dev, mut c) = connect(a.connect, Duration::from_secs(1))?;
    let lease = Duration::from_millis(a.lease_ms);
    let first = c.allocate(8, lease, Mode::Shared)?;
    let addr = first.addr();
    c.write(&first, 0, &0u64.to_le_bytes())?;
    c.control().publish(&a.name, addr, 8)?;
    println!("ready name={} addr={addr:#x}", a.name);
    let mut perm = Some(first);
    let mut n = Counts::default();
    let mut errors_printed = 0u32;
    while !stop.load(Ordering::SeqCst) && now() < deadline {
        let Some(p) = perm.as_ref() else {
            match c.acquire(addr, 8, lease, Access::ReadWrite, Mode::Shared) {
                Ok(p) => {
                    n.reacquired += 1;
                    println!("reacquired at_ms={}", ms_since(start));
                    perm = Some(p);
                }
                Err(e) => {
                    note_error(&mut errors_printed, "acquire", &e, start);
                    back_off();
                }
            }
            continue;
        };
        match c.faa(p, 0, 1) {
            Ok(_) => {
                n.ok += 1;
                if n.ok % a.every == 0 {
                    println!("progress ok={} at_ms={}", n.ok, ms_since(start));
                }
            }
            Err(e) => {
                if matches!(e, ClientError::OutcomeUnknown(_)) {
                    n.unknown += 1;
                } else {
                    n.failed += 1;
                }
                note_error(&mut errors_printed, "faa", &e, start);
                if lost_permission(&e) {
                    perm = None;
                }
                back_off();
                continue;
            }
        }
        if (n.ok + n.unknown + n.failed) % 8 == 0 {
            check_read(&mut c, p, &mut n, &mut errors_printed, start);
        }
    }
    // The last value, read (and retried) after the loop: every FAA has returned by now.
    let value = final_read(&mut c, addr, &mut perm, lease, &mut n)?;
    println!(
        "result ok={} unknown={} failed={} value={value} reads_ok={} reads_failed={} \
         violations={} reacquired={} stopped_by={} session={}",
        n.ok,
        n.unknown,
        n.failed,
        n.reads_ok,
        n.reads_failed,
        n.violations,
        n.reacquired,
        if stop.load(Ordering::SeqCst) {
            "stdin"
        } else {
            "deadline"
        },
        c.status().session(),
    );
    if let Some(p) = perm {
        // Best effort: the lease ends it anyway.
        let _ = c.revoke(p);
    }
    Ok(())
}

/// Errors after which the permission is gone and must be acquired again.
fn lost_permission(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::SessionLost
            | ClientError::SessionEnded(_)
            | ClientError::LeaseExpired
            | ClientError::NotFound
            | ClientError::Denied(_)
    )
}

/// Reads the counter and checks S ≤ V ≤ S + U.
fn check_read(
    c: &mut Client<SoftProvider>,
    p: &Perm,
    n: &mut Counts,
    errors_printed: &mut u32,
    start: std::time::Instant,
) {
    let mut word = [0u8; 8];
    match c.read(p, 0, &mut word) {
        Ok(()) => {
            n.reads_ok += 1;
            let v = u64::from_le_bytes(word);
            if v < n.ok || v > n.ok + n.unknown {
                n.violations += 1;
                println!("VIOLATION read value={v} ok={} unknown={}", n.ok, n.unknown);
            }
        }
        Err(e) => {
            n.reads_failed += 1;
            note_error(errors_printed, "read", &e, start);
        }
    }
}

/// Reads the counter once the loop is over, acquiring again and retrying for at most ten
/// seconds until a read succeeds.
fn final_read(
    c: &mut Client<SoftProvider>,
    addr: u64,
    perm: &mut Option<Perm>,
    lease: Duration,
    n: &mut Counts,
) -> Result<u64> {
    let give_up = now() + Duration::from_secs(10);
    loop {
        let attempt = match perm.as_ref() {
            Some(p) => {
                let mut word = [0u8; 8];
                c.read(p, 0, &mut word).map(|()| u64::from_le_bytes(word))
            }
            None => c
                .acquire(addr, 8, lease, Access::ReadWrite, Mode::Shared)
                .map(|p| {
                    *perm = Some(p);
                    n.reacquired += 1;
                    u64::MAX // a sentinel: read on the next turn
                }),
        };
        match attempt {
            Ok(u64::MAX) => continue,
            Ok(v) => return Ok(v),
            Err(e) if now() < give_up => {
                println!("final read: {e}; trying again");
                if lost_permission(&e) {
                    *perm = None;
                }
                back_off();
            }
            Err(e) => return Err(e).context("the counter could not be read after the loop"),
        }
    }
}

/// Prints an error line (the first 20, then every 50th, so a long outage stays readable).
fn note_error(printed: &mut u32, what: &str, e: &ClientError, start: std::time::Instant) {
    *printed += 1;
    if *printed <= 20 || *printed % 50 == 0 {
        println!("error op={what} n={printed} at_ms={}: {e}", ms_since(start));
    }
}

/// A pause between attempts while the path to the memory node is failing, so an outage does
/// not become a busy loop.
#[allow(clippy::disallowed_methods)]
fn back_off() {
    std::thread::sleep(Duration::from_millis(20));
}

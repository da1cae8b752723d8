//! A data structure of your own on protected remote memory: a table of 64-bit counters.
//!
//! ```text
//! cargo run -p patronus-examples --example counter_table
//! ```
//!
//! The table is one remote object holding `SLOTS` counters, published under a name. Several
//! threads — each with a client of its own, as a client is not shared between threads — find
//! it by name and add to the counters with one-sided fetch-and-add. At the end the counters
//! are read back and checked against what the threads added; the program exits non-zero if
//! one differs.
//!
//! It is written against [`RemoteMemory`], the interface `patronus-ods`'s hash table and queue
//! use, so the same code runs over one memory node ([`PatronusMemory`]) or several
//! (`NodeSetMemory`). Its leases are short on purpose (50 ms, and at most 200 ms in all), so
//! the run shows what every holder of remote memory does: extend a lease before it runs out,
//! and acquire the object again once the memory node refuses to extend it further.

use anyhow::{Context as _, Result, bail, ensure};
use patronus_core::{Access, Client, ClientConfig, MemoryNode, Mode, NodeConfig};
use patronus_ods::{MemError, NamedRoots, PatronusMemory, Region, RemoteMemory};
use rnic::soft::{SoftConfig, SoftProvider, TcpNode};
use std::net::SocketAddr;
use std::time::Duration;

/// How long a lease the table asks for, and how much of it must be left to use it.
const LEASE: Duration = Duration::from_millis(50);
const MARGIN: Duration = Duration::from_millis(10);
/// The memory node's maximum lifetime of a permission: extensions past it are refused.
const MAX_LIFETIME_US: u64 = 200_000;

const NAME: &str = "example/counters";
const SLOTS: u64 = 32;
const THREADS: u64 = 4;
const ADDS_PER_THREAD: u64 = 1000;

/// A fixed array of 64-bit counters in one remote object, used through one client's right to
/// it. Counter `i` is the little-endian word at byte `8 * i`.
struct CounterTable<M: RemoteMemory> {
    mem: M,
    /// The right to the whole object (a read-write, shared permission with a lease).
    region: M::Region,
    addr: u64,
    slots: u64,
    /// Times the lease was extended, and times the object was acquired again.
    extended: u64,
    reacquired: u64,
}

impl<M: RemoteMemory + NamedRoots> CounterTable<M> {
    /// Allocates a zeroed table of `slots` counters and publishes it under `name`.
    fn create(mut mem: M, name: &str, slots: u64) -> Result<Self> {
        let mut objects = mem.allocate(&[slots * 8], LEASE, Mode::Shared)?;
        let region = objects.pop().context("allocate returned no object")?;
        mem.publish(name, region.addr(), slots * 8)?;
        Ok(Self::holding(mem, region, slots))
    }

    /// Finds the table published under `name` and acquires the right to use it.
    fn open(mut mem: M, name: &str) -> Result<Self> {
        let (addr, len) = mem.lookup(name)?;
        let region = mem.acquire(addr, len, LEASE, Access::ReadWrite, Mode::Shared)?;
        Ok(Self::holding(mem, region, len / 8))
    }

    fn holding(mem: M, region: M::Region, slots: u64) -> Self {
        let addr = region.addr();
        let (extended, reacquired) = (0, 0);
        CounterTable {
            mem,
            region,
            addr,
            slots,
            extended,
            reacquired,
        }
    }

    /// Makes sure the right has at least `MARGIN` left: extends its lease (a one-sided CAS on
    /// the permission's lifetime word), or, once the node refuses (the permission reached the
    /// maximum lifetime), acquires the object again.
    fn keep_alive(&mut self) -> Result<()> {
        if !self.mem.expires_within(&self.region, MARGIN) {
            return Ok(());
        }
        if self.mem.extend(&self.region, LEASE).is_ok() {
            self.extended += 1;
            return Ok(());
        }
        self.acquire_again()
    }

    /// A fresh right in place of the current one, which is left to run out (no round trip).
    fn acquire_again(&mut self) -> Result<()> {
        let (addr, len) = (self.addr, self.slots * 8);
        let fresh = self
            .mem
            .acquire(addr, len, LEASE, Access::ReadWrite, Mode::Shared)?;
        self.mem
            .relinquish(std::mem::replace(&mut self.region, fresh))?;
        self.reacquired += 1;
        Ok(())
    }

    /// Adds `n` to counter `slot` (fetch-and-add: no lock, and no other adder is lost).
    fn add(&mut self, slot: u64, n: u64) -> Result<()> {
        ensure!(slot < self.slots, "no counter {slot}");
        for _ in 0..3 {
            self.keep_alive()?;
            match self.mem.faa(&self.region, slot * 8, n) {
                Ok(_) => return Ok(()),
                // The lease ended before the add reached the memory node (the NIC refused it,
                // or the client did not send it): nothing was added. Try on a fresh right.
                Err(MemError::Rejected | MemError::Expired) => self.acquire_again()?,
                // Anything else — above all `OutcomeUnknown`: the add may or may not have
                // happened — is not retried: adding twice would be wrong.
                Err(e) => bail!("adding to counter {slot}: {e}"),
            }
        }
        bail!("adding to counter {slot}: refused on three fresh rights")
    }

    /// Every counter, read with one READ.
    fn read_all(&mut self) -> Result<Vec<u64>> {
        self.keep_alive()?;
        let bytes = self.mem.read(&self.region, 0, (self.slots * 8) as u32)?;
        let words = bytes
            .chunks_exact(8)
            .map(|w| w.try_into().map(u64::from_le_bytes));
        Ok(words.collect::<Result<_, _>>()?)
    }

    /// Gives the right up (the table stays for the others); how often the lease was
    /// extended and the object acquired again.
    fn close(mut self) -> Result<(u64, u64)> {
        self.mem.release(self.region)?;
        Ok((self.extended, self.reacquired))
    }

    /// Withdraws the name and frees the table (every right over it ends).
    fn destroy(mut self, name: &str) -> Result<()> {
        self.mem.unpublish(name)?;
        self.mem.free(self.region)?;
        Ok(())
    }
}

/// What thread `t` adds: `t + 1` to counters `t`, `t + 1`, ... round the table.
fn adds_of(t: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..ADDS_PER_THREAD).map(move |i| ((t + i) % SLOTS, t + 1))
}

fn main() -> Result<()> {
    // A memory node in this process, on TCP loopback (as in `quickstart`), whose permissions
    // live at most 200 ms.
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let node_device = TcpNode::open(SoftConfig::default(), loopback)?;
    let config = NodeConfig {
        max_lifetime_us: MAX_LIFETIME_US,
        ..NodeConfig::default()
    };
    let node = MemoryNode::<SoftProvider>::start(node_device, config)?;
    // One compute node (one device) running a client per thread, and one for `main`.
    let device = TcpNode::open(SoftConfig::default(), loopback)?;
    let connect = || -> Result<PatronusMemory<SoftProvider>> {
        let client = Client::connect(&device, node.address(), ClientConfig::default())?;
        Ok(PatronusMemory::new(client))
    };
    let mut table = CounterTable::create(connect()?, NAME, SLOTS)?;

    let workers = (0..THREADS)
        .map(|t| Ok((t, connect()?)))
        .collect::<Result<Vec<_>>>()?;
    let counts = std::thread::scope(|s| {
        let running: Vec<_> = workers
            .into_iter()
            .map(|(t, mem)| {
                s.spawn(move || -> Result<(u64, u64)> {
                    let mut mine = CounterTable::open(mem, NAME)?;
                    for (slot, n) in adds_of(t) {
                        mine.add(slot, n)?;
                    }
                    mine.close()
                })
            })
            .collect();
        let joined = running.into_iter().map(|w| w.join());
        joined
            .map(|r| r.unwrap_or_else(|_| bail!("a worker panicked")))
            .collect::<Result<Vec<_>>>()
    })?;

    let mut expected = vec![0u64; SLOTS as usize];
    for (slot, n) in (0..THREADS).flat_map(adds_of) {
        expected[slot as usize] += n;
    }
    let got = table.read_all()?;
    ensure!(got == expected, "counters {got:?}, expected {expected:?}");
    let (extended, reacquired) = counts.iter().fold((0, 0), |(e, r), c| (e + c.0, r + c.1));
    println!(
        "{THREADS} threads made {} fetch-and-adds, adding {} to {SLOTS} counters: every counter \
         is right (the threads extended their leases {extended} times and acquired the table \
         again {reacquired} times)",
        THREADS * ADDS_PER_THREAD,
        got.iter().sum::<u64>(),
    );
    table.destroy(NAME)
}

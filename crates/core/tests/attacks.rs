//! Attack suite: the ReDMArk-style attacks of `docs/threat-model.md`, one test per
//! attack, each on both transports and in each isolation mode (`mod inproc` / `mod tcp` are the
//! shared-PD mode, then `*_pd_per_client` and `*_type2`).
//!
//! Every test keeps a [`Loot`] tally of the bytes an attacker read or changed without a grant
//! covering them, and asserts it is zero wherever the mode promises protection. The one
//! documented weakness — in the shared-PD mode a sweep of the 256 key bytes finds a live
//! window's key — is asserted as exactly that (one success) and printed, not hidden.
//!
//! The cluster runs on a virtual clock: leases end by advancing it, and waiting for the memory
//! node is a bounded spin on its published counters, never a sleep.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

#[macro_use]
mod support;

use patronus_core::client::Ticket;
use patronus_core::client::{Client, ClientConfig, ClientError, Perm};
use patronus_core::cluster::Link;
use patronus_core::manager::RECENT_KEYS as RECENT;
use patronus_core::manager::{Isolation, NodeConfig, SlabConfig, TenantId, TenantSecret};
use patronus_core::proto::connect::{Intent, Role};
use patronus_core::proto::header::LIFETIME_OFFSET;
use patronus_core::proto::messages::{Access, Mode, PermissionId, Reply, Request, Status};
use patronus_core::proto::refusal::Refusal;
use rnic::Provider;
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryBuffer, MemoryKey, MemoryRegion, ProtectionDomain,
    QpInit, QpTiming, QueuePair, SendOp, SendWr, Sge, VerbsError, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};
use support::bed::{Bed, Rdma, Rig, bed, late_client, no_wait, two, wait_for, wait_node};
use support::client::{submit, wait_reply};

type C<P> = Client<P>;

/// A smaller pool than the default: a PD per client registers the whole pool once per client.
fn node_cfg() -> NodeConfig {
    NodeConfig {
        pool_bytes: 4 << 20,
        header_count: 1024,
        mw_count: 1024,
        windows_per_client: 512,
        buffer_watermark: 512 << 10,
        max_lifetime_us: 1_000_000,
        ..crate::support::node_config()
    }
}

/// A recognisable, non-zero secret of `n` bytes.
fn secret(n: usize) -> Vec<u8> {
    (0..n).map(|i| 0x80 | (i as u8 & 0x7f)).collect()
}

/// What an attack obtained without a grant covering it.
#[derive(Debug, Default)]
struct Loot {
    /// Unauthorized ops the NIC executed.
    ops: usize,
    /// Bytes an unauthorized read returned.
    read: usize,
    /// Bytes of someone's memory an unauthorized op changed (counted by comparing the memory
    /// with what its owner stored).
    changed: usize,
}

impl Loot {
    /// Where the rig's NIC enforces window bounds, nothing was obtained. Where it does not
    /// (Soft-RoCE: `docs/rdma.md`, `mw-bounds-not-enforced`), the deviation is asserted: the
    /// attack obtained exactly `unbounded` (ops, bytes read, bytes changed) if given, else
    /// something — an attack that stops landing there means the deviation is gone.
    fn assert_bounded(&self, what: &str, enforced: bool, unbounded: Option<(usize, usize, usize)>) {
        if enforced {
            return self.assert_none(what);
        }
        let got = (self.ops, self.read, self.changed);
        match unbounded {
            Some(expected) => assert_eq!(got, expected, "{what}: unbounded windows obtain"),
            None => assert!(
                self.ops > 0,
                "{what}: the window-bounds deviation disappeared"
            ),
        }
        println!("note: {what}: rxe deviation mw-bounds-not-enforced obtained {got:?}");
    }

    fn assert_none(&self, what: &str) {
        assert_eq!(
            (self.ops, self.read, self.changed),
            (0, 0, 0),
            "{what}: unauthorized ops executed / bytes read / bytes changed"
        );
    }

    /// Counts an op that should have been refused; anything but a success or a refusal by
    /// the NIC (e.g. the client library refusing it locally) fails the test.
    fn note<T: std::fmt::Debug>(&mut self, r: &Result<T, ClientError>, what: &str) -> bool {
        match r {
            Ok(_) => {
                println!("UNAUTHORIZED OP SUCCEEDED: {what}");
                self.ops += 1;
                true
            }
            Err(ClientError::Denied(_)) => false,
            Err(e) => panic!("{what}: not a NIC refusal: {e:?}"),
        }
    }
}

/// The NIC (not the client library) refused the op.
fn refused<T: std::fmt::Debug>(r: &Result<T, ClientError>) -> bool {
    matches!(r, Err(ClientError::Denied(_)))
}

/// An unauthorized READ: should be refused by the NIC; whatever it returned counts as loot.
fn try_read<P: Provider>(
    c: &mut C<P>,
    p: &Perm,
    off: u64,
    len: usize,
    loot: &mut Loot,
    what: &str,
) {
    let mut buf = vec![0u8; len];
    let r = c.read(p, off, &mut buf);
    if loot.note(&r, what) {
        loot.read += len;
    } else {
        assert!(
            buf.iter().all(|&x| x == 0),
            "{what}: a refused read filled the buffer"
        );
    }
}

/// An unauthorized WRITE: should be refused by the NIC.
fn try_write<P: Provider>(
    c: &mut C<P>,
    loot: &mut Loot,
    p: &Perm,
    off: u64,
    data: &[u8],
    what: &str,
) {
    let r = c.write(p, off, data);
    loot.note(&r, what);
}

/// Unauthorized CASes: one that could never match, and one whose compare value is the
/// secret's first word (it would swap if it ran).
fn try_cas<P: Provider>(c: &mut C<P>, loot: &mut Loot, p: &Perm, off: u64, what: &str) {
    let r = c.cas(p, off, 0, u64::MAX);
    loot.note(&r, &format!("CAS {what}"));
    let likely = u64::from_le_bytes([0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87]);
    let r = c.cas(p, off, likely, 0);
    loot.note(&r, &format!("CAS {what}"));
}

/// An unauthorized FAA: should be refused by the NIC.
fn try_faa<P: Provider>(c: &mut C<P>, loot: &mut Loot, p: &Perm, off: u64, what: &str) {
    let r = c.faa(p, off, 1);
    loot.note(&r, &format!("FAA {what}"));
}

/// Reads `p`'s whole buffer through its (authorized) holder.
fn contents<P: Provider>(c: &mut C<P>, p: &Perm) -> Vec<u8> {
    let mut buf = vec![0u8; p.len() as usize];
    c.read(p, 0, &mut buf).unwrap();
    buf
}

/// Bytes that differ between what an owner stored and what is there now.
fn changed(expected: &[u8], now: &[u8]) -> usize {
    expected.iter().zip(now).filter(|(a, b)| a != b).count()
}

/// Waits for the reply to request `t` (its deadline bounds the wait).
fn reply_to<P: Provider>(c: &mut C<P>, t: Ticket) -> Reply {
    wait_reply(c, t).unwrap()
}

/// Sends a hand-made control request and waits for its reply.
fn send<P: Provider>(c: &mut C<P>, req: Request) -> (u64, Reply) {
    let t = submit(c, req).unwrap();
    (t.id(), reply_to(c, t))
}

/// Sends `n` copies of a hand-made control request at once (each under its own id) and
/// waits for all their replies.
#[allow(clippy::disallowed_methods)]
fn send_many<P: Provider>(c: &mut C<P>, req: Request, n: usize) -> Vec<Reply> {
    let tickets: Vec<Ticket> = (0..n).map(|_| submit(c, req).unwrap()).collect();
    tickets.into_iter().map(|t| reply_to(c, t)).collect()
}

/// A client of `tenant` on the device of cluster client `dev` (the cluster gives all its own
/// clients one configuration).
fn connect_as<P: Provider>(
    b: &Bed<P>,
    dev: usize,
    tenant: TenantId,
    secret: u64,
) -> Result<C<P>, ClientError> {
    let cfg = ClientConfig {
        tenant,
        tenant_secret: secret,
        ..no_wait()
    };
    C::<P>::connect(&b.cluster.client_ctxs[dev], b.cluster.node.address(), cfg)
}

// ---------------------------------------------------------------------------------------------
// Stale rkeys
// ---------------------------------------------------------------------------------------------

/// A revoked permission's rkey (kept by its holder, or passed to a second client) reads and
/// writes nothing: revoke over live data unbinds at once.
fn stale_rkey_after_revoke<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), no_wait());
    let (a, m) = two(&mut b);
    let s = secret(64);
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    a.write(&p, 0, &s).unwrap();
    let stale = p.forged_copy();
    a.revoke(p).unwrap();
    let mut loot = Loot::default();
    try_read(a, &stale, 0, 64, &mut loot, "holder reads after revoke");
    try_write(
        a,
        &mut loot,
        &stale,
        0,
        &[0x66; 64],
        "holder writes after revoke",
    );
    try_cas(a, &mut loot, &stale, 0, "holder after revoke");
    try_read(
        m,
        &stale,
        0,
        64,
        &mut loot,
        "second client reads with the stale rkey",
    );
    try_write(
        m,
        &mut loot,
        &stale,
        0,
        &[0x66; 64],
        "second client writes with the stale rkey",
    );
    let q = a
        .acquire(
            addr,
            64,
            Duration::from_millis(100),
            Access::Read,
            Mode::Shared,
        )
        .unwrap();
    loot.changed += changed(&s, &contents(a, &q));
    loot.assert_none("stale rkey after revoke");
}

/// A lease that ran out (the manager collected it) leaves an rkey that reads and writes
/// nothing, before and after the object has a new holder.
fn stale_rkey_after_expiry<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), late_client());
    let clock = b.clock.clone();
    let s = secret(64);
    let p = {
        let a = &mut b.cluster.clients[0];
        let p = a
            .allocate(64, Duration::from_millis(1), Mode::Exclusive)
            .unwrap();
        a.write(&p, 0, &s).unwrap();
        p
    };
    let addr = p.addr();
    clock.advance(Duration::from_micros(2_000));
    wait_for(&b, "the lease's expiry", |s| s.counters.expired >= 1);
    let (a, m) = two(&mut b);
    let mut loot = Loot::default();
    try_read(a, &p, 0, 64, &mut loot, "read after expiry");
    try_write(a, &mut loot, &p, 0, &[0x66; 64], "write after expiry");
    try_faa(a, &mut loot, &p, 0, "after expiry");
    // The object gets a new exclusive holder (in the shared-PD mode, possibly on the same
    // window, rebound with a new key byte): the expired rkey still reaches nothing.
    let q = m
        .acquire(
            addr,
            64,
            Duration::from_millis(100),
            Access::ReadWrite,
            Mode::Exclusive,
        )
        .unwrap();
    loot.changed += changed(&s, &contents(m, &q));
    let mine = vec![0x5a; 64];
    m.write(&q, 0, &mine).unwrap();
    try_read(a, &p, 0, 64, &mut loot, "read after expiry, new holder");
    try_write(
        a,
        &mut loot,
        &p,
        0,
        &[0x66; 64],
        "write after expiry, new holder",
    );
    loot.changed += changed(&mine, &contents(m, &q));
    loot.assert_none("stale rkey after expiry");
}

/// The window is handed to another client: A revokes while B asks for the same object (sent
/// together, so they usually share a batch and the manager rebinds A's window straight to B:
/// MW handover), and in the shared-PD mode B gets the very same window (the pool has one) with
/// a new key byte. Every rkey A kept from the window's last [`RECENT`] binds is refused and
/// touches nothing of B's.
fn stale_rkey_after_handover<R: Rig>(t: R, iso: Isolation) {
    let node = NodeConfig {
        mw_count: 1, // shared PD: every grant (read-write, contiguous: one window) shares it
        windows_per_client: 2,
        shards: 1, // one window cannot be split between shards
        ..node_cfg()
    };
    let mut b = bed(t, iso, 2, node, no_wait());
    let node = &b.cluster.node;
    let (a, m) = {
        let (x, y) = b.cluster.clients.split_at_mut(1);
        (&mut x[0], &mut y[0])
    };
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    let mut p = Some(p);
    let mut stale: Vec<Perm> = Vec::new();
    let mut loot = Loot::default();
    // Binds of the window alternate A, B, A, B, ...: A's grant j rounds back was 2j + 1 binds
    // before B's current one, so copies up to 7 rounds old are all within RECENT binds.
    let rounds = RECENT / 2 + 1;
    for round in 0..rounds {
        let mine = p.take().unwrap();
        let mine_key = mine.rkey();
        stale.push(mine.forged_copy());
        // B asks first and waits (the virtual clock stands still); A's revoke then ends A's
        // permission and grants B in one batch, rebinding A's window to B where the mode
        // allows (MW handover).
        let sent = m.status().clock().now();
        let acquire = submit(
            m,
            Request::Acquire {
                addr,
                size: 64,
                lease_us: 100_000,
                access: Access::ReadWrite,
                mode: Mode::Exclusive,
                wait_us: 1_000_000,
            },
        )
        .unwrap();
        wait_node(node, "B waiting", |s| {
            s.occupancy.is_some_and(|o| o.waiters == 1)
        });
        let revoke = submit(
            a,
            Request::Revoke {
                id: mine.id(),
                free: false,
            },
        )
        .unwrap();
        assert_eq!(reply_to(a, revoke), Reply::Revoked);
        let q = match reply_to(m, acquire) {
            Reply::Granted(g) => m
                .control()
                .adopt(g, Access::ReadWrite, Mode::Exclusive, sent),
            other => panic!("{other:?}"),
        };
        drop(mine);
        if iso == Isolation::SharedPd {
            assert_eq!(
                q.rkey().index(),
                mine_key.index(),
                "handed over the same window"
            );
            assert_ne!(q.rkey(), mine_key);
        }
        let theirs = vec![0x40 | round as u8; 64];
        m.write(&q, 0, &theirs).unwrap();
        for (j, old) in stale.iter().enumerate() {
            let what = format!("round {round}: A's rkey of round {j}");
            try_write(a, &mut loot, old, 0, &[0x66; 64], &what);
        }
        let newest = stale.last().unwrap();
        try_read(a, newest, 0, 64, &mut loot, "A's newest stale rkey");
        loot.changed += changed(&theirs, &contents(m, &q));
        m.revoke(q).unwrap();
        p = Some(
            a.acquire(
                addr,
                64,
                Duration::from_millis(100),
                Access::ReadWrite,
                Mode::Exclusive,
            )
            .unwrap(),
        );
    }
    let handovers = node.fresh_stats().counters.handovers;
    println!(
        "stale rkey after handover [{t:?}, {iso:?}]: {handovers} MW handovers in {rounds} rounds"
    );
    if iso == Isolation::SharedPd {
        // (With a PD per client windows never cross clients; type 2 has no handover.)
        assert_eq!(handovers, rounds as u64, "A's window went straight to B");
    }
    loot.assert_none("stale rkey after handover");
}

// ---------------------------------------------------------------------------------------------
// Guessing
// ---------------------------------------------------------------------------------------------

/// Brute force over the 256 key bytes of a window currently granted to another client. The
/// attacker knows the victim's buffer address and window index (the strongest position: it
/// only lacks the key byte) and sweeps every key byte through its own QPs; every wrong guess
/// faults its QP and the client library fails over, so the sweep goes on.
///
/// Shared PD: the one right key byte works (the documented weakness of the paper's design);
/// a PD per client: the PD check refuses all 256; type 2 (which has a PD per client too):
/// the PD check again, ahead of the type-2 QP check.
fn brute_force_key_byte<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), no_wait());
    let (v, m) = two(&mut b);
    let s = secret(64);
    let victim = v
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    v.write(&victim, 0, &s).unwrap();
    // The attacker's vehicle: a permission of its own, forged to point at the victim.
    let own = m
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    let index = victim.rkey().index();
    let mut hits = Vec::new();
    let mut loot = Loot::default();
    for byte in 0..=255u8 {
        let guess = own.forged(victim.addr(), victim.len(), MemoryKey::new(index, byte));
        let mut buf = vec![0u8; 64];
        match m.read(&guess, 0, &mut buf) {
            Ok(()) => {
                hits.push(byte);
                loot.ops += 1;
                loot.read += buf.len();
            }
            Err(ClientError::Denied(_)) => {}
            Err(e) => panic!("guess {byte:#04x}: not a NIC refusal: {e:?}"),
        }
    }
    let faults = m.status().qps().switches();
    loot.changed += changed(&s, &contents(v, &victim));
    println!(
        "brute force [{t:?}, {iso:?}]: {}/256 key-byte guesses succeeded, {} bytes read, \
         {faults} attacker QP faults",
        hits.len(),
        loot.read
    );
    match iso {
        Isolation::SharedPd => {
            println!(
                "!!! KNOWN WEAKNESS (shared PD, type-1 windows, the paper's design): the \
                 256-guess sweep found the victim's live key byte {:#04x} and read {} bytes \
                 of its secret, at the cost of {faults} QP faults. Use PdPerClient or Type2 \
                 isolation against untrusted clients.",
                victim.rkey().key_byte(),
                loot.read
            );
            assert_eq!(
                hits,
                vec![victim.rkey().key_byte()],
                "exactly the right key byte"
            );
            assert_eq!((loot.ops, loot.read), (1, 64));
            assert_eq!(faults, 255, "every wrong guess cost a QP fault");
            assert_eq!(loot.changed, 0, "reads change nothing");
        }
        Isolation::PdPerClient | Isolation::Type2 => {
            assert_eq!(faults, 256, "every guess cost a QP fault");
            loot.assert_none("brute force");
        }
    }
    // Both sides still work: the attacker's faults broke only the attacker's QPs.
    assert_eq!(contents(v, &victim), s);
    m.write(&own, 0, b"attacker").unwrap();
}

// ---------------------------------------------------------------------------------------------
// Ranges and rights
// ---------------------------------------------------------------------------------------------

/// A valid rkey used outside its window: past the end, straddling the end, before the start,
/// and at addresses that wrap around the 64-bit space. The NIC refuses every one and no byte
/// changes — neither the neighbouring object (another client's) nor the part of a straddling
/// write that lies inside the window.
fn out_of_range_and_wrap_around<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), no_wait());
    let (m, v) = two(&mut b);
    let own = m
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    let mine = secret(own.len() as usize);
    m.write(&own, 0, &mine).unwrap();
    // The next object of the class (a neighbour in the slab), held by another client.
    let victim = v
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    let theirs = vec![0x3c; victim.len() as usize];
    v.write(&victim, 0, &theirs).unwrap();
    let (addr, len) = (own.addr(), own.len());
    // Built afresh for every attempt: under type-2 isolation each refusal switches the
    // attacker's QP and its windows are rebound with new rkeys (refreshed in `own`), and a
    // stale key would be refused for the wrong reason.
    let at = |a: u64, l: u64| own.forged(a, l, own.rkey());
    let mut loot = Loot::default();
    // Past the end and straddling it (the forged length lets the client library issue them).
    let wide = 1 << 16;
    try_read(m, &at(addr, wide), len, 64, &mut loot, "read past the end");
    try_read(
        m,
        &at(addr, wide),
        len - 8,
        16,
        &mut loot,
        "read straddling the end",
    );
    try_read(
        m,
        &at(addr, wide),
        0,
        4096,
        &mut loot,
        "read of 4 KiB from the start",
    );
    try_write(
        m,
        &mut loot,
        &at(addr, wide),
        len,
        &[0x66; 64],
        "write past the end",
    );
    try_write(
        m,
        &mut loot,
        &at(addr, wide),
        len - 8,
        &[0x66; 16],
        "write straddling the end",
    );
    try_cas(m, &mut loot, &at(addr, wide), len, "past the end");
    try_faa(m, &mut loot, &at(addr, wide), len, "past the end");
    // The neighbour, addressed directly with the attacker's own (valid) rkey.
    try_read(
        m,
        &at(victim.addr(), 64),
        0,
        64,
        &mut loot,
        "read of the neighbour",
    );
    try_write(
        m,
        &mut loot,
        &at(victim.addr(), 64),
        0,
        &[0x66; 64],
        "write of the neighbour",
    );
    // Before the start: the header in front of the buffer (the window begins at its
    // lifetime field, 8 bytes before the buffer).
    try_read(
        m,
        &at(addr - 32, 64),
        0,
        16,
        &mut loot,
        "read before the window",
    );
    try_write(
        m,
        &mut loot,
        &at(addr - 32, 64),
        0,
        &[0x66; 16],
        "write before the window",
    );
    try_read(
        m,
        &at(addr - 16, 64),
        0,
        16,
        &mut loot,
        "read straddling the start",
    );
    // Wrap-around: ranges that overflow the address space, and the very last/first words.
    let top = u64::MAX - 7;
    try_read(
        m,
        &at(top, 16),
        0,
        16,
        &mut loot,
        "read wrapping past u64::MAX",
    );
    try_write(
        m,
        &mut loot,
        &at(top, 16),
        0,
        &[0x66; 16],
        "write wrapping past u64::MAX",
    );
    try_cas(m, &mut loot, &at(top, 16), 0, "at u64::MAX - 7");
    let last = u64::MAX - 0xfff;
    try_read(
        m,
        &at(last, 0x1000),
        0,
        0x1000,
        &mut loot,
        "read of the last page",
    );
    try_read(m, &at(0, 64), 0, 64, &mut loot, "read at address 0");
    try_faa(m, &mut loot, &at(0, 64), 0, "at address 0");
    // The window itself still works (the refusals were about the range, not the key).
    let mut word = [0u8; 8];
    m.read(&at(addr, len), 0, &mut word).unwrap();
    loot.changed += changed(&mine, &contents(m, &own));
    loot.changed += changed(&theirs, &contents(v, &victim));
    let enforced = t.enforces_window_bounds(&b.cluster);
    loot.assert_bounded("out of range", enforced, None);
}

/// A read-only permission carries no write or atomic right: WRITE, CAS and FAA through it are
/// refused by the NIC, and so is reaching the buffer (or writing the lifetime word) through
/// its separate lifetime window.
fn read_only_misuse<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), no_wait());
    let (o, r) = two(&mut b);
    let s = secret(64);
    let owner = o
        .allocate(64, Duration::from_secs(1), Mode::Shared)
        .unwrap();
    o.write(&owner, 0, &s).unwrap();
    let ro = r
        .acquire(
            owner.addr(),
            64,
            Duration::from_secs(1),
            Access::Read,
            Mode::Shared,
        )
        .unwrap();
    assert!(
        !ro.contiguous(),
        "a read grant has a separate lifetime window"
    );
    assert_eq!(contents(r, &ro), s, "reading is granted");
    let mut loot = Loot::default();
    try_write(
        r,
        &mut loot,
        &ro,
        0,
        &[0x66; 64],
        "write through a read grant",
    );
    try_write(
        r,
        &mut loot,
        &ro,
        8,
        &[0x66; 8],
        "small write through a read grant",
    );
    try_cas(r, &mut loot, &ro, 0, "through a read grant");
    try_faa(r, &mut loot, &ro, 8, "through a read grant");
    // The lifetime window: read + atomic on 8 bytes only.
    // (Built afresh each time: under type 2 a refusal rebinds the holder's windows.)
    let via_lifetime = || ro.forged(ro.addr(), ro.len(), ro.lifetime_rkey());
    try_read(
        r,
        &via_lifetime(),
        0,
        64,
        &mut loot,
        "buffer via the lifetime window",
    );
    try_write(
        r,
        &mut loot,
        &via_lifetime(),
        0,
        &[0x66; 64],
        "buffer via the lifetime window",
    );
    let word = || {
        ro.forged(
            ro.id().header_addr + LIFETIME_OFFSET as u64,
            8,
            ro.lifetime_rkey(),
        )
    };
    try_write(
        r,
        &mut loot,
        &word(),
        0,
        &u64::MAX.to_le_bytes(),
        "plain write of the lifetime word",
    );
    let mut lifetime = [0u8; 8];
    r.read(&word(), 0, &mut lifetime).unwrap();
    assert_ne!(lifetime, [0xff; 8], "the lifetime word was not written");
    // A batch: the read runs, the write is refused, and the read-only holder keeps working.
    let results = {
        let mut batch = r.batch();
        batch.read(&ro, 0, 8).write(&ro, 0, &[0x66; 8]);
        batch.execute()
    };
    assert!(results[0].is_ok() && refused(&results[1]), "{results:?}");
    assert_eq!(contents(r, &ro), s);
    // Freeing ends everyone's permissions: a reader of the owner tenant may not. `free`
    // consumes the handle (here a copy of it), so the refused call still ends the reader's
    // permission, and frees nothing.
    let f = r.free(ro.forged_copy());
    assert!(matches!(f, Err(ClientError::InvalidArgument(_))), "{f:?}");
    let after = r.read(&ro, 0, &mut [0u8; 8]);
    assert!(matches!(after, Err(ClientError::Denied(_))), "{after:?}");
    assert_eq!(contents(o, &owner), s, "nothing was freed");
    loot.changed += changed(&s, &contents(o, &owner));
    // Only the buffer read through the 8-byte lifetime window rests on the window's bounds.
    let enforced = t.enforces_window_bounds(&b.cluster);
    loot.assert_bounded("read-only misuse", enforced, Some((1, 64, 0)));
}

// ---------------------------------------------------------------------------------------------
// Control path
// ---------------------------------------------------------------------------------------------

/// Client B forges control requests naming A's permission (its id is easy to learn: header
/// address + start time): revoke, free, extend, renew, rebind. Every one is answered
/// `NotFound` — the same as for a permission that does not exist — and A's permission keeps
/// working with its lease unchanged.
fn forged_control_requests<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), late_client());
    let clock = b.clock.clone();
    let s = secret(64);
    let (a, m) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_millis(2), Mode::Exclusive)
        .unwrap();
    a.write(&p, 0, &s).unwrap();
    let id = p.id();
    let forged = [
        Request::Revoke { id, free: true },
        Request::Revoke { id, free: false },
        Request::Extend {
            id,
            lease_us: 1_000_000,
        },
        Request::Renew {
            id,
            lease_us: 1_000_000,
        },
        Request::Rebind { id },
    ];
    let nobody = PermissionId {
        header_addr: id.header_addr,
        start_us: id.start_us + 1,
    };
    for req in forged {
        let (_, reply) = send(m, req);
        assert_eq!(reply, Reply::Failed(Status::NotFound), "{req:?}");
        // Indistinguishable from a permission that does not exist.
        let probe = match req {
            Request::Revoke { free, .. } => Request::Revoke { id: nobody, free },
            Request::Extend { lease_us, .. } => Request::Extend {
                id: nobody,
                lease_us,
            },
            Request::Renew { lease_us, .. } => Request::Renew {
                id: nobody,
                lease_us,
            },
            _ => Request::Rebind { id: nobody },
        };
        assert_eq!(send(m, probe).1, reply, "{probe:?}");
    }
    // A's permission still works, and nobody got a second one.
    a.write(&p, 8, b"still A!").unwrap();
    let mut expected = s.clone();
    expected[8..16].copy_from_slice(b"still A!");
    assert_eq!(contents(a, &p), expected);
    let occ = b.cluster.node.fresh_stats().occupancy.unwrap();
    assert_eq!(occ.permissions, 1, "no permission created for B: {occ:?}");
    // The forged extension and renewal did not prolong the lease: it ends on time.
    clock.advance(Duration::from_micros(3_000));
    wait_for(&b, "A's lease to expire", |s| s.counters.expired >= 1);
    let a = &mut b.cluster.clients[0];
    let mut loot = Loot::default();
    try_read(
        a,
        &p,
        0,
        64,
        &mut loot,
        "read after the lease A never extended",
    );
    loot.assert_none("forged control requests");
}

/// A replay of A's own, long-answered revoke (request id reused) after the object was granted
/// again — to A and to another client, on the same header — changes nothing: the memory node
/// answers a known id from its reply cache without running it again, refuses the id with
/// another body, a fresh copy of the stale request fails the ABA filter (start time), and so
/// does the replay once the cache has forgotten the id.
fn replayed_revoke_after_regrant<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), no_wait());
    let s = secret(64);
    let (a, c) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_secs(1), Mode::Shared)
        .unwrap();
    a.write(&p, 0, &s).unwrap();
    let (addr, old) = (p.addr(), p.id());
    let revoke = Request::Revoke {
        id: old,
        free: false,
    };
    let (rid, reply) = send(a, revoke);
    assert_eq!(reply, Reply::Revoked);
    drop(p);
    let q = a
        .acquire(
            addr,
            64,
            Duration::from_secs(1),
            Access::ReadWrite,
            Mode::Shared,
        )
        .unwrap();
    assert_eq!(q.id().header_addr, old.header_addr, "the header is reused");
    assert!(q.id().start_us > old.start_us);
    let r = c
        .acquire(addr, 64, Duration::from_secs(1), Access::Read, Mode::Shared)
        .unwrap();
    let before = b.cluster.node.fresh_stats().counters;
    let (a, c) = two(&mut b);
    // The exact replay is answered from the cache; the same id carrying another body (a
    // freeing revoke) is refused as malformed, never run.
    assert_eq!(a.control().replay(rid, revoke).unwrap(), Reply::Revoked);
    let freeing = Request::Revoke {
        id: old,
        free: true,
    };
    assert_eq!(
        a.control().replay(rid, freeing).unwrap(),
        Reply::Failed(Status::InvalidArgument)
    );
    // A fresh copy of the stale request (new id): the start time no longer matches.
    assert_eq!(send(a, freeing).1, Reply::Failed(Status::NotFound));
    // Push the id out of the reply cache, then replay it: the ABA filter answers.
    // (More than the node's reply cache holds, pipelined 15 at a time, to the same manager
    // shard: a stale id of the same header.)
    let bogus = Request::Extend {
        id: PermissionId {
            header_addr: old.header_addr,
            start_us: 1,
        },
        lease_us: 1,
    };
    for _ in 0..9 {
        for reply in send_many(a, bogus, 15) {
            assert_eq!(reply, Reply::Failed(Status::NotFound));
        }
    }
    assert_eq!(
        a.control().replay(rid, freeing).unwrap(),
        Reply::Failed(Status::NotFound)
    );
    // Nothing ended, nothing was freed: both current holders keep working.
    a.write(&q, 0, b"A again!").unwrap();
    let mut expected = s.clone();
    expected[..8].copy_from_slice(b"A again!");
    assert_eq!(contents(c, &r), expected);
    let after = b.cluster.node.fresh_stats();
    assert_eq!(after.counters.ended, before.ended, "no permission ended");
    assert_eq!(after.occupancy.unwrap().permissions, 2);
    assert_eq!(after.occupancy.unwrap().live_objects, 1);
}

/// A duplicate of an acquire that is still waiting (a retry, here forced by replaying the
/// original's id) joins the waiting request: one grant, answered twice with the same
/// permission, and no orphaned second permission holding the object afterwards.
fn retried_waiting_acquire<R: Rig>(t: R, iso: Isolation) {
    let cfg = ClientConfig {
        acquire_wait: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 3, node_cfg(), cfg);
    let p = b.cluster.clients[0]
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    let acquire = Request::Acquire {
        addr,
        size: 64,
        lease_us: 1_000_000,
        access: Access::ReadWrite,
        mode: Mode::Exclusive,
        wait_us: 5_000_000,
    };
    let node = &b.cluster.node;
    let (a, rest) = b.cluster.clients.split_at_mut(1);
    let (a, w) = (&mut a[0], &mut rest[0]);
    let sent = w.status().clock().now();
    let rid = submit(w, acquire).unwrap();
    let rpcs = wait_node(node, "the waiter", |s| {
        s.occupancy.is_some_and(|o| o.waiters == 1)
    })
    .counters
    .rpcs;
    let (first, second) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let first = w.control().replay(rid.id(), acquire).unwrap();
            (first, reply_to(w, rid))
        });
        wait_node(node, "the duplicate", |s| s.counters.rpcs > rpcs);
        let occ = node.fresh_stats().occupancy.unwrap();
        assert_eq!(occ.waiters, 1, "the duplicate joined the waiter: {occ:?}");
        a.revoke(p).unwrap();
        h.join().unwrap()
    });
    assert_eq!(first, second, "both copies answered with the same grant");
    let Reply::Granted(g) = first else {
        panic!("{first:?}")
    };
    let s = wait_for(&b, "the grant", |s| s.counters.granted == 2);
    assert_eq!(
        s.occupancy.unwrap().permissions,
        1,
        "one permission, not two"
    );
    let w = &mut b.cluster.clients[1];
    let q = w
        .control()
        .adopt(g, Access::ReadWrite, Mode::Exclusive, sent);
    w.write(&q, 0, b"granted once").unwrap();
    w.revoke(q).unwrap();
    let s = wait_for(&b, "all ended", |s| {
        s.occupancy
            .is_some_and(|o| o.permissions == 0 && o.waiters == 0)
    });
    assert_eq!(s.counters.granted, s.counters.ended);
    let late = b.cluster.clients[2].acquire(
        addr,
        8,
        Duration::from_millis(1),
        Access::ReadWrite,
        Mode::Exclusive,
    );
    assert!(late.is_ok(), "an orphan holds the object: {late:?}");
}

// ---------------------------------------------------------------------------------------------
// Tenants
// ---------------------------------------------------------------------------------------------

const SECRET_1: u64 = 0x1111_2222_3333_4444;
const SECRET_2: u64 = 0x5555_6666_7777_8888;

fn tenants_cfg() -> NodeConfig {
    NodeConfig {
        tenants: vec![
            TenantSecret {
                tenant: 1,
                secret: SECRET_1,
            },
            TenantSecret {
                tenant: 2,
                secret: SECRET_2,
            },
        ],
        ..node_cfg()
    }
}

fn tenant_1() -> ClientConfig {
    ClientConfig {
        tenant: 1,
        tenant_secret: SECRET_1,
        ..no_wait()
    }
}

/// Another tenant's object: it cannot be acquired (the answer is the one an address with no
/// object gets), shared onward or freed; after the owner shares it read-only it can be
/// acquired read-only, never read-write, never freed. Wrong secrets are refused at connect, a
/// client cannot switch tenants later, clients of one tenant share freely, and a disconnect
/// frees nothing.
fn another_tenants_object<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, tenants_cfg(), tenant_1());
    let clock = b.clock.clone();
    // Wrong secret, unknown tenant, and the default tenant of a node that has tenants.
    for (tenant, secret) in [(2, SECRET_1), (1, 0), (3, SECRET_2), (0, 0)] {
        let r = connect_as(&b, 0, tenant, secret);
        assert!(
            matches!(r, Err(ClientError::Unauthorized)),
            "tenant {tenant}: {r:?}"
        );
    }
    let mut x = connect_as(&b, 1, 2, SECRET_2).unwrap();
    let s = secret(64);
    let (owner, mate) = two(&mut b);
    let p = owner
        .allocate(64, Duration::from_millis(1), Mode::Shared)
        .unwrap();
    owner.write(&p, 0, &s).unwrap();
    let addr = p.addr();
    // An address that is no object (a buffer start of the class that nobody allocated).
    let spare = owner
        .allocate(64, Duration::from_secs(1), Mode::Shared)
        .unwrap();
    let nothing = spare.addr();
    owner.free(spare).unwrap();
    let mut loot = Loot::default();
    for access in [Access::Read, Access::ReadWrite] {
        let theirs = x.acquire(addr, 64, Duration::from_secs(1), access, Mode::Shared);
        let none = x.acquire(nothing, 64, Duration::from_secs(1), access, Mode::Shared);
        assert!(matches!(theirs, Err(ClientError::NotFound)), "{theirs:?}");
        assert_eq!(
            format!("{theirs:?}"),
            format!("{none:?}"),
            "indistinguishable"
        );
    }
    assert!(matches!(
        x.control().share(addr, 2, Some(Access::ReadWrite)),
        Err(ClientError::NotFound)
    ));
    let (_, r) = send(
        &mut x,
        Request::Revoke {
            id: p.id(),
            free: true,
        },
    );
    assert_eq!(r, Reply::Failed(Status::NotFound), "freeing by forged id");
    // A second Hello cannot move a client into another tenant, even with its secret.
    let hello = Request::Hello {
        tenant: 1,
        secret: SECRET_1,
    };
    assert_eq!(send(&mut x, hello).1, Reply::Failed(Status::Unauthorized));
    assert!(matches!(
        x.acquire(addr, 64, Duration::from_secs(1), Access::Read, Mode::Shared),
        Err(ClientError::NotFound)
    ));
    // Shared read-only: read yes, read-write no, free never.
    owner.control().share(addr, 2, Some(Access::Read)).unwrap();
    let ro = x
        .acquire(addr, 64, Duration::from_secs(1), Access::Read, Mode::Shared)
        .unwrap();
    assert_eq!(contents(&mut x, &ro), s, "the shared read works");
    assert!(matches!(
        x.acquire(
            addr,
            64,
            Duration::from_secs(1),
            Access::ReadWrite,
            Mode::Shared
        ),
        Err(ClientError::NotFound)
    ));
    try_write(
        &mut x,
        &mut loot,
        &ro,
        0,
        &[0x66; 64],
        "write through the shared read grant",
    );
    loot.changed += changed(&s, &contents(&mut x, &ro));
    assert!(matches!(x.free(ro), Err(ClientError::NotOwner)));
    // Shared read-write: writing yes, freeing still never.
    owner
        .control()
        .share(addr, 2, Some(Access::ReadWrite))
        .unwrap();
    let rw = x
        .acquire(
            addr,
            64,
            Duration::from_secs(1),
            Access::ReadWrite,
            Mode::Shared,
        )
        .unwrap();
    let mut now_expected = s.clone();
    now_expected[..8].copy_from_slice(b"tenant 2");
    x.write(&rw, 0, b"tenant 2").unwrap();
    assert!(matches!(x.free(rw), Err(ClientError::NotOwner)));
    // Withdrawn: gone again for tenant 2.
    owner.control().share(addr, 2, None).unwrap();
    assert!(matches!(
        x.acquire(addr, 64, Duration::from_secs(1), Access::Read, Mode::Shared),
        Err(ClientError::NotFound)
    ));
    // The same tenant shares freely (a share to one's own tenant is not needed).
    let q = mate
        .acquire(
            addr,
            64,
            Duration::from_secs(1),
            Access::ReadWrite,
            Mode::Shared,
        )
        .unwrap();
    assert_eq!(contents(mate, &q), now_expected);
    mate.revoke(q).unwrap();
    // A disconnect frees nothing: the owner goes away holding a permission; after its lease
    // ends, a client of the same tenant still finds the object and its bytes.
    drop(p);
    drop(b.cluster.clients.remove(0));
    clock.advance(Duration::from_micros(1_100_000));
    wait_for(&b, "the owner's leases to end", |s| {
        s.occupancy.is_some_and(|o| o.permissions == 0)
    });
    let mate = &mut b.cluster.clients[0];
    let q = mate
        .acquire(
            addr,
            64,
            Duration::from_secs(1),
            Access::ReadWrite,
            Mode::Exclusive,
        )
        .unwrap();
    assert_eq!(contents(mate, &q), now_expected, "the object survived");
    // And its owner tenant (not tenant 2) may free it.
    assert!(matches!(
        x.acquire(addr, 64, Duration::from_secs(1), Access::Read, Mode::Shared),
        Err(ClientError::NotFound)
    ));
    mate.free(q).unwrap();
    loot.assert_none("another tenant's object");
}

/// Tenant 1 writes a secret and frees the object (keeping a stale copy of its rkey); tenant 2
/// allocates until it gets the same address. What tenant 2 reads there is all zero — even if
/// tenant 1 wrote through its stale rkey after the free (delayed unbinding lets such a write
/// land in memory nobody owns) — and once tenant 2 owns it, tenant 1's stale rkey is dead.
fn freed_object_reused_by_another_tenant<R: Rig>(t: R, iso: Isolation) {
    let node = NodeConfig {
        slab: SlabConfig {
            slab_bytes: 4096,
            ..SlabConfig::default()
        },
        ..tenants_cfg()
    };
    let mut b = bed(t, iso, 1, node, tenant_1());
    let mut x = connect_as(&b, 0, 2, SECRET_2).unwrap();
    let a = &mut b.cluster.clients[0];
    let s = secret(64);
    let p = a
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    a.write(&p, 0, &s).unwrap();
    let stale = p.forged_copy();
    a.free(p).unwrap();
    // Allowed to land (the memory belongs to nobody) or be refused; either way it must not
    // reach the next owner.
    let late_write = a.write(&stale, 0, &[0x66; 64]);
    println!("stale write after free [{t:?}, {iso:?}]: {late_write:?}");
    assert!(late_write.is_ok() || refused(&late_write), "{late_write:?}");
    let mut loot = Loot::default();
    let mut held = Vec::new();
    let mut reused = None;
    for _ in 0..256 {
        let q = x
            .allocate(64, Duration::from_secs(1), Mode::Exclusive)
            .unwrap();
        let got = contents(&mut x, &q);
        loot.read += got.iter().filter(|&&b| b != 0).count();
        if q.addr() == addr {
            reused = Some(q);
            break;
        }
        held.push(q);
    }
    let q = reused.expect("the freed object was never reused");
    let mine = vec![0x22; 64];
    x.write(&q, 0, &mine).unwrap();
    try_read(
        a,
        &stale,
        0,
        64,
        &mut loot,
        "tenant 1's stale rkey on tenant 2's object",
    );
    try_write(
        a,
        &mut loot,
        &stale,
        0,
        &[0x66; 64],
        "tenant 1's stale rkey on tenant 2's object",
    );
    loot.changed += changed(&mine, &contents(&mut x, &q));
    loot.assert_none("reuse by another tenant");
}

// ---------------------------------------------------------------------------------------------
// Bypassing the client library
// ---------------------------------------------------------------------------------------------

/// Waits (bounded wall time) for one completion on `cq`.
#[allow(clippy::disallowed_methods)]
fn one_completion<Q: CompletionQueue>(cq: &Q) -> WorkCompletion {
    let t0 = Instant::now();
    let mut wcs = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut wcs) == 1 {
            return wcs[0];
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no completion");
        std::thread::yield_now();
    }
}

/// QPs connected by hand to the memory node, outside the client library. A data connection
/// that claims the victim's client id needs the victim's 64-bit connection secret (with a PD
/// per client it would be created in the victim's PD), a loopback connection the manager's
/// (its QP reaches the whole pool); wrong or malformed ones are refused at the handshake. A
/// control connection is accepted, but its QP grants no remote rights: a READ or WRITE with
/// the victim's exact address and rkey through it is refused.
fn hand_made_connections<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), no_wait());
    let s = secret(64);
    let v = &mut b.cluster.clients[0];
    let victim = v
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    v.write(&victim, 0, &s).unwrap();
    let victim_id = v.status().id();
    let ctx = &b.cluster.client_ctxs[0];
    let address = b.cluster.node.address();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = || {
        pd.create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 16,
            max_recv_wr: 1,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap()
    };
    let data = |secret, slot| Intent {
        role: Role::Data,
        client_id: victim_id,
        secret,
        slot,
    };
    let intents = [
        data(0, 0),
        data(1, 0),
        data(0x0123_4567_89ab_cdef, 0),
        data(0x0123_4567_89ab_cdef, 7),
        // A control connection claiming the victim's session (shard 0's slot, as a client's
        // first connection has) without its secret.
        Intent {
            role: Role::Control,
            client_id: victim_id,
            secret: 0x0123_4567_89ab_cdef,
            slot: 0,
        },
        Intent {
            role: Role::Loopback,
            client_id: 0,
            secret: 0x0123_4567_89ab_cdef,
            slot: 0,
        },
    ];
    for intent in intents {
        let r = qp().connect(address, &intent.encode());
        let Err(VerbsError::ConnectionRefused(reason)) = &r else {
            panic!("{intent:?}: {r:?}");
        };
        // The victim's session is live: a wrong secret is said to be one (and nothing more).
        if intent.role != Role::Loopback {
            assert_eq!(
                Refusal::parse(reason),
                Some(Refusal::WrongSecret),
                "{intent:?}: {reason}"
            );
        }
    }
    let mut garbage = data(0, 0).encode();
    garbage[2] = 9; // no such role
    for private in [&garbage[..], &[0u8; 16][..], b"PT"] {
        let r = qp().connect(address, private);
        assert!(
            matches!(r, Err(VerbsError::ConnectionRefused(_))),
            "{private:?}: {r:?}"
        );
    }
    // Control connections: accepted (Hello comes later), no remote rights on their QPs.
    let buf = ctx.alloc_buffer(4096).unwrap();
    let mr = pd.reg_mr(&buf, 0, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let local = Sge {
        addr: buf.addr(),
        length: 64,
        lkey: mr.lkey(),
    };
    let control = Intent {
        role: Role::Control,
        client_id: 0,
        secret: 0,
        slot: 0,
    };
    let ops = [
        SendOp::Read {
            local,
            remote_addr: victim.addr(),
            rkey: victim.rkey(),
        },
        SendOp::Write {
            local,
            remote_addr: victim.addr(),
            rkey: victim.rkey(),
        },
    ];
    let mut loot = Loot::default();
    let mut statuses = Vec::new();
    for op in ops {
        let what = format!("{op:?} through a control QP");
        let ctrl = qp();
        ctrl.connect(address, &control.encode()).unwrap();
        let wr = SendWr {
            wr_id: 1,
            signaled: true,
            op,
        };
        ctrl.post_send(std::slice::from_ref(&wr)).unwrap();
        let wc = one_completion(&cq);
        statuses.push((what, wc.status));
        // The secret has no zero byte: whatever a READ brought back shows here.
        let mut got = [0u8; 64];
        buf.read(0, &mut got).unwrap();
        loot.read += got.iter().filter(|&&x| x != 0).count();
    }
    let v = &mut b.cluster.clients[0];
    loot.changed += changed(&s, &contents(v, &victim));
    loot.assert_none("hand-made connections");
    for (what, status) in statuses {
        // The QP's access flags are checked first (before any rkey check).
        assert_eq!(status, WcStatus::RemoteInvalidRequestError, "{what}");
    }
}

every_rig! {
    stale_rkey_after_revoke => super::stale_rkey_after_revoke;
    stale_rkey_after_expiry => super::stale_rkey_after_expiry;
    stale_rkey_after_handover => super::stale_rkey_after_handover;
    brute_force_key_byte => super::brute_force_key_byte;
    out_of_range_and_wrap_around => super::out_of_range_and_wrap_around;
    read_only_misuse => super::read_only_misuse;
    forged_control_requests => super::forged_control_requests;
    replayed_revoke_after_regrant => super::replayed_revoke_after_regrant;
    retried_waiting_acquire => super::retried_waiting_acquire;
    another_tenants_object => super::another_tenants_object;
    freed_object_reused_by_another_tenant => super::freed_object_reused_by_another_tenant;
    hand_made_connections => super::hand_made_connections;
}

//! rkey key bytes (`docs/conformance.md`, "rkey key byte"; ReDMArk V1/M2, and A3 guessing):
//! +1 per bind by default (`ibv_inc_rkey`), seeded random on request, and an exhaustive
//! guessing attack that finds only the current key.

use super::harness::*;
use rnic::{
    AccessFlags, MemoryBuffer, MemoryKey, MemoryWindow, MwType, ProtectionDomain, Provider,
    QueuePair, SendOp, WcStatus,
};

const R: AccessFlags = AccessFlags::REMOTE_READ;
const OFF: usize = 8192;

/// Default policy: every bind (including a type-1 unbind) moves the key byte by +1 and keeps
/// the index; type-2 likewise across LOCAL_INV.
pub fn rkey_increments_per_bind<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let mut prev = mw.rkey();
    for i in 0..300 {
        // Over 256 binds the key byte wraps around.
        let st = if i % 7 == 6 {
            w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw, None, 0, 0, R)
        } else {
            w.bind1(&mw, OFF, 64, R)
        };
        assert_eq!(st, WcStatus::Success);
        let now = mw.rkey();
        assert_eq!(now, prev.incremented(), "bind #{i}: {prev:?} -> {now:?}");
        prev = now;
    }
    let conn = w.connect();
    let mw2 = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let other = w.mpd.alloc_mw(MwType::Type2).unwrap();
    assert_ne!(
        mw2.rkey().index(),
        other.rkey().index(),
        "windows have distinct indexes"
    );
    assert_ne!(mw2.rkey().index(), mw.rkey().index());
    let mut prev = mw2.rkey();
    for _ in 0..3 {
        let st = w.bind_on(
            &conn.sqp,
            conn.scq(),
            &mw2,
            Some(&w.mmr),
            w.maddr(OFF),
            64,
            R,
        );
        assert_eq!(st, WcStatus::Success);
        let now = mw2.rkey();
        assert_eq!(now, prev.incremented());
        assert_eq!(w.read(&conn, 0, OFF, 8, now).status, WcStatus::Success);
        let wc = conn.exec_server(&w.bed, SendOp::LocalInvalidate { rkey: now });
        assert_eq!(wc.status, WcStatus::Success);
        prev = now;
    }
}

/// The key bytes a window gets over `binds` binds on a fresh bed with `keys`.
fn key_sequence<P: Provider, B: TestBed<P>>(keys: Keys, binds: usize) -> Vec<MemoryKey> {
    let w = World::<P, B>::with(BedOptions { keys });
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let mut out = vec![mw.rkey()];
    for _ in 0..binds {
        assert_eq!(w.bind1(&mw, OFF, 64, R), WcStatus::Success);
        out.push(mw.rkey());
    }
    out
}

/// `KeyPolicy::Random { seed }`: key bytes differ from the increment sequence and from one
/// bind to the next, and are reproducible per seed.
pub fn rkey_random_keys_reproducible<P: Provider, B: TestBed<P>>() {
    let a = key_sequence::<P, B>(Keys::Random(7), 32);
    let b = key_sequence::<P, B>(Keys::Random(7), 32);
    let c = key_sequence::<P, B>(Keys::Random(8), 32);
    assert_eq!(a, b, "same seed, same keys");
    assert_ne!(a, c, "another seed, other keys");
    for s in [&a, &c] {
        assert!(
            s.iter().all(|k| k.index() == s[0].index()),
            "the index never changes"
        );
        assert!(
            s.windows(2).all(|p| p[0] != p[1]),
            "every bind changes the key: {s:?}"
        );
        let increments = s.windows(2).filter(|p| p[1] == p[0].incremented()).count();
        assert!(increments < 4, "random keys look sequential: {s:?}");
    }
    let inc = key_sequence::<P, B>(Keys::Increment, 32);
    assert!(inc.windows(2).all(|p| p[1] == p[0].incremented()));
}

/// ReDMArk V1 vs M2: how often is the next key the old one plus one? Always with the default
/// policy, rarely with the random one (bounded, with a fixed seed so the count is exact).
pub fn rkey_random_not_predictable<P: Provider, B: TestBed<P>>() {
    let n = 128;
    let count = |s: &[MemoryKey]| s.windows(2).filter(|p| p[1] == p[0].incremented()).count();
    assert_eq!(count(&key_sequence::<P, B>(Keys::Increment, n)), n);
    let random = key_sequence::<P, B>(Keys::Random(0x5eed), n);
    // Expected n/255 < 1; allow a generous margin.
    assert!(
        count(&random) <= 4,
        "predictable steps: {} of {n}",
        count(&random)
    );
    let distinct: std::collections::HashSet<u8> = random.iter().map(|k| k.key_byte()).collect();
    assert!(
        distinct.len() > 64,
        "only {} distinct key bytes in {n} binds",
        distinct.len()
    );
}

/// ReDMArk attack 1: after a window's rebind, trying all 256 key bytes on its index succeeds
/// only for the current key. Every wrong guess is a remote access error that kills the QP, so
/// the attacker reconnects between guesses.
fn guess_all_keys<P: Provider, B: TestBed<P>>(keys: Keys) {
    let w = World::<P, B>::with(BedOptions { keys });
    let (mw, old) = w.window1(OFF, 64, R);
    assert_eq!(w.bind1(&mw, OFF, 64, R), WcStatus::Success);
    let current = mw.rkey();
    let secret = w.fill_mn(OFF, 64, 0x77);
    let mut conn = w.connect();
    let mut hits = Vec::new();
    for byte in 0..=255u8 {
        let guess = MemoryKey::new(current.index(), byte);
        w.cbuf.write(0, &[0u8; 64]).unwrap();
        let wc = w.read(&conn, 0, OFF, 64, guess);
        if wc.status == WcStatus::Success {
            assert_eq!(w.cn_bytes(0, 64), secret);
            hits.push(guess);
        } else {
            w.assert_access_error(&conn, &wc);
            assert_eq!(
                w.cn_bytes(0, 64),
                vec![0u8; 64],
                "a failed guess leaked data"
            );
            conn.reconnect(&w.bed);
        }
    }
    assert_eq!(
        hits,
        vec![current],
        "only the current key may succeed (old key was {old:?})"
    );
}

/// Exhaustive guessing with the default (+1) key policy.
pub fn rkey_guessing_finds_only_current_key<P: Provider, B: TestBed<P>>() {
    guess_all_keys::<P, B>(Keys::Increment);
}

/// Exhaustive guessing with seeded random keys.
pub fn rkey_guessing_finds_only_current_key_random<P: Provider, B: TestBed<P>>() {
    guess_all_keys::<P, B>(Keys::Random(42));
}

/// A bind work request may name the new rkey's key byte (rdma-core's `bind_mw.rkey`): the
/// window then answers to exactly that byte, and the previous rkey is dead.
pub fn bind_with_chosen_key_byte<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (mw, old) = w.window1(OFF, 64, R);
    for chosen in [0x5a_u8, 0x00, 0xff, 0x5b] {
        let op = SendOp::BindMw {
            mw: &mw,
            bind: rnic::BindInfo {
                mr: Some(&w.mmr),
                addr: w.maddr(OFF),
                length: 64,
                access: R,
                key: Some(chosen),
                target_qp: None,
            },
        };
        if let Err((_, e)) = w.admin.cqp.post_send(&[wr::<P>(0xb1d, op)]) {
            panic!("bind post refused: {e}");
        }
        let wc = wait_completions::<P, B>(&w.bed, &w.admin.ccq, 1)[0];
        assert_eq!(wc.status, WcStatus::Success);
        let now = mw.rkey();
        assert_eq!(now.key_byte(), chosen);
        assert_eq!(now.index(), old.index());
    }
    assert_eq!(
        w.read(&conn, 0, OFF, 8, mw.rkey()).status,
        WcStatus::Success
    );
    let conn = w.connect();
    assert_eq!(
        w.read(&conn, 0, OFF, 8, old).status,
        WcStatus::RemoteAccessError,
        "the rkey before the chosen one is dead"
    );
}

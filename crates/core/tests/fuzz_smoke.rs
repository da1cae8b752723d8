//! Stable fuzz smoke of the control decoders, run by `cargo test`: the control messages
//! (`decode_request`, `decode_reply`, through `ControlProtocol` too), the connection intent
//! (`Intent::decode`), the control channel's slot views (`SlotReader`, written by
//! `SlotWriter`) and the permission header (`Header::decode`). Whatever the bytes they never
//! panic, and a slot or intent that decodes re-encodes to exactly the same bytes (the checks
//! of the libFuzzer target `control_decode`, shared in `fuzz/checks/control.rs`). Inputs:
//! messages built by `arbitrary` from seeded random bytes (and those bytes themselves), seeded
//! mutations of valid encodings, and every file of `fuzz/corpus/control_decode/` and
//! `fuzz/artifacts/control_decode/`.
//!
//! Reproduce a failure: each test prints its seed and iteration count; a failing input is
//! printed and saved under `target/tmp/fuzz_smoke/`. Rerun with
//! `PATRONUS_FUZZ_SEED=<seed> cargo test -p patronus-core --test fuzz_smoke`, or copy the
//! saved file to `fuzz/corpus/control_decode/regress-<what>` to keep it (`docs/fuzzing.md`).
//! `PATRONUS_FUZZ_ITERS=<n>` runs longer.

#[path = "../../../fuzz/checks/control.rs"]
mod check;
#[path = "../../../fuzz/smoke.rs"]
mod smoke;

use arbitrary::Unstructured;
use patronus_core::proto::connect::{Intent, Role};
use patronus_core::proto::header::Header;
use patronus_core::proto::messages::{
    Access, Grant, Mode, PermissionId, ROOT_NAME_MAX, Reply, Request, RootName, SLOT_SIZE, Status,
    decode_reply, decode_request, encode_reply, encode_request,
};
use patronus_core::proto::shards::ShardMap;
use patronus_core::rpc::SlotWriter;
use rand::rngs::StdRng;
use rand::{Rng, RngCore};
use rnic::MemoryKey;
use smoke::{Origin, Replay, Settings, Stats};

/// The libFuzzer target whose corpus is replayed.
const TARGET: &str = "control_decode";
/// Default iterations of each message test (a few seconds in a debug build).
const ITERS: u64 = 100_000;
/// Default iterations of the slot-view test (each input is read at every offset).
const SLOT_ITERS: u64 = 30_000;

type Arb<T> = arbitrary::Result<T>;

fn arb_access(u: &mut Unstructured<'_>) -> Arb<Access> {
    u.choose(&[Access::Read, Access::ReadWrite]).copied()
}

fn arb_mode(u: &mut Unstructured<'_>) -> Arb<Mode> {
    u.choose(&[Mode::Shared, Mode::Exclusive]).copied()
}

fn arb_id(u: &mut Unstructured<'_>) -> Arb<PermissionId> {
    Ok(PermissionId {
        header_addr: u.arbitrary()?,
        start_us: u.arbitrary()?,
    })
}

/// A valid root name: 1 to 32 bytes of UTF-8 without NUL.
fn arb_name(u: &mut Unstructured<'_>) -> Arb<RootName> {
    let mut name: String = u.arbitrary::<&str>()?.replace('\0', "");
    while name.len() > ROOT_NAME_MAX {
        name.pop();
    }
    RootName::new(&name)
        .or_else(|| RootName::new("root"))
        .ok_or(arbitrary::Error::IncorrectFormat)
}

fn arb_request(u: &mut Unstructured<'_>) -> Arb<Request> {
    Ok(match u.int_in_range(0..=11u8)? {
        0 => Request::Allocate {
            size: u.arbitrary()?,
            lease_us: u.arbitrary()?,
            mode: arb_mode(u)?,
        },
        1 => Request::Acquire {
            addr: u.arbitrary()?,
            size: u.arbitrary()?,
            lease_us: u.arbitrary()?,
            access: arb_access(u)?,
            mode: arb_mode(u)?,
            wait_us: u.arbitrary()?,
        },
        2 => Request::Extend {
            id: arb_id(u)?,
            lease_us: u.arbitrary()?,
        },
        3 => Request::Hello {
            tenant: u.arbitrary()?,
            secret: u.arbitrary()?,
        },
        4 => Request::Renew {
            id: arb_id(u)?,
            lease_us: u.arbitrary()?,
        },
        5 => Request::Share {
            addr: u.arbitrary()?,
            tenant: u.arbitrary()?,
            access: if u.arbitrary()? {
                Some(arb_access(u)?)
            } else {
                None
            },
        },
        6 => Request::UseQp {
            slot: u.arbitrary()?,
        },
        7 => Request::Rebind { id: arb_id(u)? },
        8 => Request::Revoke {
            id: arb_id(u)?,
            free: u.arbitrary()?,
        },
        9 => Request::Publish {
            name: arb_name(u)?,
            addr: u.arbitrary()?,
            len: u.arbitrary()?,
        },
        10 => Request::Lookup { name: arb_name(u)? },
        _ => Request::Unpublish { name: arb_name(u)? },
    })
}

/// A reply in the encoder's domain (a Welcome names 1 to 255 shards).
fn arb_reply(u: &mut Unstructured<'_>) -> Arb<Reply> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Reply::Granted(Grant {
            id: arb_id(u)?,
            buffer_addr: u.arbitrary()?,
            buffer_len: u.arbitrary()?,
            buffer_rkey: MemoryKey(u.arbitrary()?),
            lifetime_rkey: MemoryKey(u.arbitrary()?),
            lifetime_us: u.arbitrary()?,
            contiguous: u.arbitrary()?,
            max_lifetime_us: u.arbitrary()?,
        }),
        1 => Reply::Extended {
            lifetime_us: u.arbitrary()?,
        },
        2 => Reply::Revoked,
        3 => Reply::Shared,
        4 => Reply::Named,
        5 => Reply::Found {
            addr: u.arbitrary()?,
            len: u.arbitrary()?,
        },
        6 => Reply::Welcome {
            client_id: u.arbitrary()?,
            secret: u.arbitrary()?,
            type2: u.arbitrary()?,
            shards: ShardMap {
                shards: u.int_in_range(1..=255)?,
                header_base: u.arbitrary()?,
                headers_per_shard: u.arbitrary()?,
                buffer_base: u.arbitrary()?,
                buffer_span: u.arbitrary()?,
            },
            max_lifetime_us: u.arbitrary()?,
        },
        _ => Reply::Failed(*u.choose(&Status::ALL)?),
    })
}

fn arb_intent(u: &mut Unstructured<'_>) -> Arb<Intent> {
    Ok(Intent {
        role: *u.choose(&[Role::Control, Role::Data, Role::Loopback])?,
        client_id: u.arbitrary()?,
        secret: u.arbitrary()?,
        slot: u.arbitrary()?,
    })
}

/// A header the encoder accepts: a 48-bit address, a length of 11-bit mantissa × 2^(0..=31).
fn arb_header(u: &mut Unstructured<'_>) -> Arb<Header> {
    Ok(Header {
        buffer_addr: u.int_in_range(0..=(1 << 48) - 1)?,
        buffer_len: u.int_in_range(0..=2047u64)? << u.int_in_range(0..=31)?,
        buffer_mw: u.arbitrary()?,
        header_mw: u.arbitrary()?,
        start_us: u.arbitrary()?,
        lifetime_us: u.arbitrary()?,
    })
}

/// One valid message of each kind: the seed corpus and the starting points of the mutations.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let id = PermissionId {
        header_addr: 0x1000,
        start_us: 77,
    };
    let name = RootName::new("orders").expect("a valid name");
    let requests = [
        (
            "allocate",
            Request::Allocate {
                size: 4096,
                lease_us: 1000,
                mode: Mode::Exclusive,
            },
        ),
        (
            "acquire",
            Request::Acquire {
                addr: 0x10_0000,
                size: 64,
                lease_us: 500,
                access: Access::ReadWrite,
                mode: Mode::Shared,
                wait_us: 10,
            },
        ),
        ("extend", Request::Extend { id, lease_us: 3 }),
        (
            "hello",
            Request::Hello {
                tenant: 4,
                secret: 0xfeed,
            },
        ),
        ("renew", Request::Renew { id, lease_us: 8 }),
        (
            "share",
            Request::Share {
                addr: 0x40,
                tenant: 2,
                access: Some(Access::Read),
            },
        ),
        (
            "withdraw",
            Request::Share {
                addr: 0x40,
                tenant: 2,
                access: None,
            },
        ),
        ("use-qp", Request::UseQp { slot: 2 }),
        ("rebind", Request::Rebind { id }),
        ("revoke", Request::Revoke { id, free: true }),
        (
            "publish",
            Request::Publish {
                name,
                addr: 0x40,
                len: 128,
            },
        ),
        ("lookup", Request::Lookup { name }),
        ("unpublish", Request::Unpublish { name }),
    ];
    let replies = [
        (
            "granted",
            Reply::Granted(Grant {
                id,
                buffer_addr: 0x10_0000,
                buffer_len: 64,
                buffer_rkey: MemoryKey(3),
                lifetime_rkey: MemoryKey(4),
                lifetime_us: 5,
                contiguous: true,
                max_lifetime_us: 6,
            }),
        ),
        ("extended", Reply::Extended { lifetime_us: 9 }),
        ("revoked", Reply::Revoked),
        ("shared", Reply::Shared),
        ("named", Reply::Named),
        ("found", Reply::Found { addr: 0x40, len: 9 }),
        (
            "welcome",
            Reply::Welcome {
                client_id: 3,
                secret: 99,
                type2: true,
                shards: ShardMap {
                    shards: 4,
                    header_base: 0x1000,
                    headers_per_shard: 7,
                    buffer_base: 0x10_0000,
                    buffer_span: 1 << 20,
                },
                max_lifetime_us: 1_000_000,
            },
        ),
        ("failed", Reply::Failed(Status::NotOwner)),
    ];
    let intents = [
        ("control", Role::Control, 0, 0, 0),
        ("data", Role::Data, 7, 0xdead_beef, 2),
        ("loopback", Role::Loopback, 0, 0x5ec2e7, 0),
    ];
    let mut seeds = Vec::new();
    for (i, (name, req)) in requests.iter().enumerate() {
        seeds.push((
            format!("request-{name}"),
            encode_request(i as u64 + 1, req).to_vec(),
        ));
    }
    for (i, (name, reply)) in replies.iter().enumerate() {
        seeds.push((
            format!("reply-{name}"),
            encode_reply(i as u64 + 1, reply).to_vec(),
        ));
    }
    for (name, role, client_id, secret, slot) in intents {
        let intent = Intent {
            role,
            client_id,
            secret,
            slot,
        };
        seeds.push((format!("intent-{name}"), intent.encode().to_vec()));
    }
    seeds
}

/// A valid encoding built by `arbitrary` from `raw`, checked to round trip: a request, a
/// reply, an intent (with `true`: a message decoder must accept it) or a header (`false`).
/// `None` if `raw` ran out before a message was built.
fn arb_encoding(raw: &[u8]) -> Option<(Vec<u8>, bool)> {
    let u = &mut Unstructured::new(raw);
    let id = u.arbitrary().ok()?;
    Some(match u.int_in_range(0..=3u8).ok()? {
        0 => {
            let req = arb_request(u).ok()?;
            let wire = encode_request(id, &req);
            assert_eq!(decode_request(&wire), Ok((id, req)), "request round trip");
            (wire.to_vec(), true)
        }
        1 => {
            let reply = arb_reply(u).ok()?;
            let wire = encode_reply(id, &reply);
            assert_eq!(decode_reply(&wire), Ok((id, reply)), "reply round trip");
            (wire.to_vec(), true)
        }
        2 => {
            let intent = arb_intent(u).ok()?;
            let wire = intent.encode();
            assert_eq!(Intent::decode(&wire), Some(intent), "intent round trip");
            (wire.to_vec(), true)
        }
        _ => {
            let header = arb_header(u).ok()?;
            let words = header.encode();
            assert!(words.is_ok(), "{header:?} does not encode");
            let words = words.ok()?;
            assert_eq!(Header::decode(words), header, "header round trip");
            (words.iter().flat_map(|w| w.to_ne_bytes()).collect(), false)
        }
    })
}

fn random_bytes(rng: &mut StdRng, buf: &mut [u8]) -> usize {
    let n = rng.random_range(0..=buf.len());
    rng.fill_bytes(&mut buf[..n]);
    n
}

/// Seeded random bytes as garbage, then as the `arbitrary` source of a message that must
/// round trip and re-encode canonically.
#[test]
fn arbitrary_messages_round_trip_and_garbage_never_panics() {
    const TEST: &str = "arbitrary_messages_round_trip_and_garbage_never_panics";
    let s = Settings::from_env(TEST, ITERS);
    let mut rng = s.rng();
    let mut stats = Stats::new(TEST, Some(s.seed));
    let mut raw = [0u8; 2 * SLOT_SIZE];
    for iteration in 0..s.iters {
        let origin = Origin::Random {
            test: TEST,
            seed: s.seed,
            iteration,
        };
        let n = random_bytes(&mut rng, &mut raw);
        let raw = &raw[..n];
        let _replay = Replay::new(origin, raw);
        stats.record(check::check_message(raw) > 0);
        if let Some((wire, message)) = arb_encoding(raw) {
            let _replay = Replay::new(origin, &wire);
            let accepted = check::check_message(&wire) > 0;
            assert!(accepted || !message, "a valid encoding is refused");
            stats.record(accepted);
        }
    }
}

/// Valid encodings (the seeds, and `arbitrary` messages) damaged by seeded edits, half of the
/// time brought back to their length (zero-padded) so the edits reach the fields' checks.
#[test]
fn mutated_valid_messages_never_panic_and_stay_canonical() {
    const TEST: &str = "mutated_valid_messages_never_panic_and_stay_canonical";
    let s = Settings::from_env(TEST, ITERS);
    let mut rng = s.rng();
    let mut stats = Stats::new(TEST, Some(s.seed));
    let seeds: Vec<Vec<u8>> = seeds().into_iter().map(|(_, bytes)| bytes).collect();
    let mut raw = [0u8; 2 * SLOT_SIZE];
    for iteration in 0..s.iters {
        let mut wire = if rng.random() {
            seeds[rng.random_range(0..seeds.len())].clone()
        } else {
            rng.fill_bytes(&mut raw);
            arb_encoding(&raw).map(|(wire, _)| wire).unwrap_or_default()
        };
        let len = wire.len();
        smoke::mutate(&mut rng, &mut wire);
        if rng.random() {
            wire.resize(len, 0);
        }
        let origin = Origin::Random {
            test: TEST,
            seed: s.seed,
            iteration,
        };
        let _replay = Replay::new(origin, &wire);
        stats.record(check::check_message(&wire) > 0);
    }
    assert!(
        s.iters < 1000 || stats.decoded * 10 >= stats.tried,
        "fewer than one mutated message in ten still decodes: the smoke no longer reaches deep \
         into the decoders"
    );
}

/// Slot views over seeded random bytes, and over slots written by a `SlotWriter` at random
/// offsets, read exactly the bytes in view.
#[test]
fn slot_views_read_exactly_what_was_written() {
    const TEST: &str = "slot_views_read_exactly_what_was_written";
    let s = Settings::from_env(TEST, SLOT_ITERS);
    let mut rng = s.rng();
    let mut stats = Stats::new(TEST, Some(s.seed));
    let mut raw = [0u8; SLOT_SIZE + 16];
    for iteration in 0..s.iters {
        let origin = Origin::Random {
            test: TEST,
            seed: s.seed,
            iteration,
        };
        let n = random_bytes(&mut rng, &mut raw);
        let raw = &raw[..n];
        {
            let _replay = Replay::new(origin, raw);
            check::check_slot_reader(raw);
            stats.record(true);
        }
        // The bytes drive writes into a fresh slot, mirrored in a model.
        let u = &mut Unstructured::new(raw);
        let size = u.int_in_range(0..=SLOT_SIZE).unwrap_or(SLOT_SIZE);
        let mut slot = vec![0xee; size];
        let mut model = vec![0u8; size];
        {
            let mut w = SlotWriter::new(&mut slot);
            while !u.is_empty() {
                let width = u.choose(&[1usize, 4, 8, 3]).copied().unwrap_or(1);
                let Some(last) = size.checked_sub(width) else {
                    continue;
                };
                let at = u.int_in_range(0..=last).unwrap_or(0);
                let value: u64 = u.arbitrary().unwrap_or(0);
                let bytes = value.to_le_bytes();
                match width {
                    1 => w.u8(at, value as u8),
                    4 => w.u32(at, value as u32),
                    8 => w.u64(at, value),
                    _ => w.put(at, &bytes[..width]),
                }
                model[at..at + width].copy_from_slice(&bytes[..width]);
            }
        }
        let _replay = Replay::new(origin, &slot);
        assert_eq!(slot, model, "SlotWriter wrote something else than asked");
        check::check_slot_reader(&slot);
        stats.record(true);
    }
}

/// Every file of the libFuzzer corpus and artifacts; the committed seeds must be there.
#[test]
fn corpus_and_artifacts_replay() {
    smoke::replay_corpus(TARGET, seeds().len(), |bytes| check::check_input(bytes) > 0);
}

/// The committed seed corpus is the current encoding of `seeds`.
#[test]
fn seed_corpus_is_current() {
    for (name, bytes) in seeds() {
        smoke::seed_file(TARGET, &name, &bytes);
    }
}

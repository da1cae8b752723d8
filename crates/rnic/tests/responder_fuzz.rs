//! Random and mutated requests thrown at the sans-IO responder over a real protection table:
//! it never panics, and memory changes only inside a bound window, through its current rkey,
//! with the window's rights.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use rnic::memory::{MemoryBlock, Pinning};
use rnic::soft::mpt::{BindRequest, KeyPolicy, MrEntry, ProtectionTable};
use rnic::soft::qp::responder::{RecvSource, ResponderCtx, ResponderState};
use rnic::soft::wire::{self, Frame, Packet, Request, RequestOp};
use rnic::{AccessFlags, DeviceAttr, MemoryKey, MwType, PdId, Psn, QpNumber, RecvWr};

const LEN: usize = 8192;
const WIN_OFF: u64 = 1024;
const WIN_LEN: u64 = 256;

struct NoRecv;
impl RecvSource for NoRecv {
    fn take(&mut self) -> Option<RecvWr> {
        None
    }
}

struct Bed {
    mpt: ProtectionTable,
    block: MemoryBlock,
    mr_key: MemoryKey,
    window: MemoryKey,
    pd: PdId,
}

fn bed() -> Bed {
    let attr = DeviceAttr {
        max_mr: 16,
        max_mw: 16,
        ..DeviceAttr::default()
    };
    let mpt = ProtectionTable::new(&attr, KeyPolicy::Increment);
    let block = MemoryBlock::new(LEN).unwrap();
    let pd = PdId(1);
    let entry = MrEntry::register(
        pd,
        &block,
        0,
        LEN,
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        Pinning::Never,
    )
    .unwrap();
    let mr_key = mpt.insert_mr(entry).unwrap();
    let mw = mpt.alloc_mw(pd, MwType::Type1).unwrap();
    let window = mpt
        .bind_mw(BindRequest {
            mw,
            qp: QpNumber(7),
            qp_pd: pd,
            mr: mpt.mr(mr_key),
            addr: block.addr() + WIN_OFF,
            len: WIN_LEN,
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            key: None,
            named_qp: false,
        })
        .unwrap();
    // A recognizable pattern everywhere.
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    block.write(0, &pattern).unwrap();
    Bed {
        mpt,
        block,
        mr_key,
        window,
        pd,
    }
}

fn snapshot(b: &Bed) -> Vec<u8> {
    let mut v = vec![0u8; LEN];
    b.block.read(0, &mut v).unwrap();
    v
}

/// Checks that bytes changed only where a legal WRITE through the window could change them.
fn check_changes(b: &Bed, before: &[u8], after: &[u8], op: &RequestOp<Vec<u8>>) {
    let legal = match op {
        RequestOp::Write { addr, rkey, data } if *rkey == b.window && !data.is_empty() => {
            let start = addr.wrapping_sub(b.block.addr());
            let end = start.saturating_add(data.len() as u64);
            (start >= WIN_OFF && end <= WIN_OFF + WIN_LEN).then_some((start as usize, end as usize))
        }
        _ => None,
    };
    for (i, (x, y)) in before.iter().zip(after).enumerate() {
        if x != y {
            let inside = legal.is_some_and(|(s, e)| i >= s && i < e);
            assert!(inside, "byte {i} changed by {op:?}");
        }
    }
}

fn arb_key(b_window: MemoryKey, b_mr: MemoryKey) -> impl Strategy<Value = MemoryKey> {
    prop_oneof![
        Just(b_window),
        Just(b_window.incremented()),
        Just(b_mr),
        any::<u32>().prop_map(MemoryKey),
    ]
}

fn arb_op(
    base: u64,
    window: MemoryKey,
    mr: MemoryKey,
) -> impl Strategy<Value = RequestOp<Vec<u8>>> {
    let addr = prop_oneof![
        (0u64..LEN as u64 + 64).prop_map(move |o| base + o),
        (WIN_OFF - 8..WIN_OFF + WIN_LEN + 8).prop_map(move |o| base + o),
        any::<u64>(),
    ];
    (
        addr,
        arb_key(window, mr),
        0u8..5,
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(addr, rkey, kind, data, v, len)| match kind {
            0 => RequestOp::Read {
                addr,
                rkey,
                len: len % 600,
            },
            1 => RequestOp::Write { addr, rkey, data },
            2 => RequestOp::CompareSwap {
                addr,
                rkey,
                compare: v,
                swap: !v,
            },
            3 => RequestOp::FetchAdd { addr, rkey, add: v },
            _ => RequestOp::Send {
                data,
                invalidate: Some(rkey),
            },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_requests_touch_only_what_a_window_allows(seed_ops in proptest::collection::vec(
        (0u64..LEN as u64 + 64, 0u8..5, proptest::collection::vec(any::<u8>(), 0..300), any::<u64>(), 0u8..4), 1..20))
    {
        let b = bed();
        let base = b.block.addr();
        let mut st = ResponderState::new(Psn::new(0));
        for (i, (off, kind, data, v, keysel)) in seed_ops.into_iter().enumerate() {
            let rkey = match keysel { 0 => b.window, 1 => b.window.incremented(), 2 => b.mr_key, _ => MemoryKey(v as u32) };
            let addr = if keysel == 3 { v } else { base + off };
            let op = match kind {
                0 => RequestOp::Read { addr, rkey, len: (v % 600) as u32 },
                1 => RequestOp::Write { addr, rkey, data },
                2 => RequestOp::CompareSwap { addr, rkey, compare: v, swap: !v },
                3 => RequestOp::FetchAdd { addr, rkey, add: v },
                _ => RequestOp::Send { data, invalidate: Some(rkey) },
            };
            let before = snapshot(&b);
            let ctx = ResponderCtx {
                mpt: &b.mpt,
                pd: b.pd,
                qpn: QpNumber(7),
                qp_access: AccessFlags::REMOTE_ALL,
                max_msg: 4096,
            };
            let req = Request {
                dst_qp: QpNumber(7),
                psn: Psn::new(i as u32),
                op: op.clone(),
                ack_req: true,
            };
            let out = st.handle(&ctx, &req, &mut NoRecv);
            let after = snapshot(&b);
            check_changes(&b, &before, &after, &op);
            if out.error.is_some() {
                break; // the QP is in ERR: nothing more is executed on it
            }
        }
    }

    #[test]
    fn mutated_frames_decode_or_fail_cleanly_and_never_escape_the_window(
        op in arb_op(0, MemoryKey(0x80_0000 << 8), MemoryKey(0)),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
    ) {
        let b = bed();
        // Re-target the generated op at this bed's addresses and keys.
        let op = match op {
            RequestOp::Write { addr, rkey, data } => RequestOp::Write {
                addr: b.block.addr().wrapping_add(addr % (LEN as u64 + 64)),
                rkey: if rkey.index() == 0x80_0000 { b.window } else { rkey },
                data,
            },
            other => other,
        };
        let mut bytes = Vec::new();
        wire::encode_frame(&Frame::Packet(Packet::Request(Request {
            dst_qp: QpNumber(7),
            psn: Psn::new(0),
            op,
            ack_req: true,
        })), &mut bytes);
        for (pos, x) in flips {
            let n = bytes.len();
            bytes[pos % n] ^= x;
        }
        if let Ok(Frame::Packet(Packet::Request(req))) = wire::decode_frame(&bytes) {
            let owned = Packet::Request(req).to_owned_packet();
            let Packet::Request(req) = owned else { unreachable!() };
            let before = snapshot(&b);
            let ctx = ResponderCtx {
                mpt: &b.mpt,
                pd: b.pd,
                qpn: QpNumber(7),
                qp_access: AccessFlags::REMOTE_ALL,
                max_msg: 4096,
            };
            let mut st = ResponderState::new(req.psn);
            let _ = st.handle(&ctx, &req, &mut NoRecv);
            check_changes(&b, &before, &snapshot(&b), &req.op);
        }
    }
}

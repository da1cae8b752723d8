//! The allocation chains on the soft NIC, in-process and over TCP: a client allocates by SEND alone, each
//! grant's window works on the client's access QP only, and a request past the filled slots
//! finds no chain. The node's objects are not called between posting and the checks.

use super::super::chunks::OneSidedChunks;
use super::*;
use parking_lot::Mutex;
use rnic::soft::{SoftConfig, SoftFabric, SoftProvider};
use rnic::{AcceptPolicy, QpState, WcOpcode};
use std::collections::VecDeque;
use std::sync::Arc;

type P = SoftProvider;
type Qp = <P as Provider>::Qp;

/// Hands out the node's QPs in the order the client connects them.
struct Handout(Mutex<VecDeque<Qp>>);

impl AcceptPolicy<P> for Handout {
    fn create_qp(&self, _private_data: &[u8]) -> Result<Qp, String> {
        self.0.lock().pop_front().ok_or_else(|| "no QP left".into())
    }
    fn established(&self, _qp: Qp, _private_data: &[u8]) {}
}

fn rc_qp(pd: &<P as Provider>::Pd, cq: &<P as Provider>::Cq, recvs: u32) -> Qp {
    pd.create_qp(QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 16,
        max_recv_wr: recvs,
        access: AccessFlags::REMOTE_ALL,
        timing: QpTiming {
            rnr_retry: 1,
            ..QpTiming::default()
        },
    })
    .unwrap()
}

/// Polls `cq` until a completion arrives (bounded: the chain engine is another thread).
#[allow(clippy::disallowed_methods)] // a bound on a wait for the NIC's threads
fn next(cq: &<P as Provider>::Cq) -> WorkCompletion {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut wc = [WorkCompletion::default(); 1];
    while cq.poll(&mut wc) == 0 {
        assert!(std::time::Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
    wc[0]
}

#[test]
fn in_process() {
    let fabric = SoftFabric::new();
    let ctx = fabric.open_device(SoftConfig::default());
    allocates_by_send_and_only_the_access_qp_reaches_the_chunk(ctx.clone(), ctx);
}

#[test]
fn over_tcp() {
    let open =
        || rnic::soft::TcpNode::open(SoftConfig::default(), ([127, 0, 0, 1], 0).into()).unwrap();
    allocates_by_send_and_only_the_access_qp_reaches_the_chunk(open(), open());
}

/// `ctx` is the node's device, `cn` the client's (the same in-process: its QPs connect to its
/// own listener).
fn allocates_by_send_and_only_the_access_qp_reaches_the_chunk(
    ctx: rnic::soft::SoftContext,
    cn: rnic::soft::SoftContext,
) {
    let (npd, cpd) = (ctx.alloc_pd().unwrap(), cn.alloc_pd().unwrap());
    let (ncq, ccq) = (ctx.create_cq(64).unwrap(), cn.create_cq(64).unwrap());
    let arena = Arena::<P>::new(&ctx, 4, 4096).unwrap();
    let mut chains = AllocChains::<P>::new(&ctx, &npd, &arena, 4, QpTiming::default()).unwrap();
    let (access_n, other_n) = (rc_qp(&npd, &ncq, 1), rc_qp(&npd, &ncq, 1));
    let policy = Arc::new(Handout(Mutex::new(
        [access_n.clone(), other_n.clone(), chains.qp().clone()].into(),
    )));
    let listener = ctx.listen(policy).unwrap();
    let addr = ctx.listener_address(&listener);
    let (access, other, alloc) = (
        rc_qp(&cpd, &ccq, 1),
        rc_qp(&cpd, &ccq, 1),
        rc_qp(&cpd, &ccq, 8),
    );
    for qp in [&access, &other, &alloc] {
        qp.connect(&addr, b"").unwrap();
    }
    // The manager's part, in advance: four slots filled, a chain posted for each.
    let mut chunks = OneSidedChunks::new(4, 4);
    chunks.open(1, 4);
    let refills = chunks.refill(1, u32::MAX);
    assert_eq!(refills.len(), 4);
    for r in &refills {
        chains.post(&arena, r, access_n.qp_num()).unwrap();
    }

    // The client: four allocations, each one SEND; grants land in its buffer.
    let buf = cn.alloc_buffer(4096).unwrap();
    let mr = cpd.reg_mr(&buf, 0, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = |off: u64, len: u32| Sge {
        addr: buf.addr() + off,
        length: len,
        lkey: mr.lkey(),
    };
    let mut grants = Vec::new();
    for k in 0..4u64 {
        alloc
            .post_recv(&[RecvWr {
                wr_id: 100 + k,
                sge: Some(sge(GRANT_BYTES as u64 * k, GRANT_BYTES as u32)),
            }])
            .unwrap();
        let request = SendWr {
            wr_id: k,
            signaled: true,
            op: SendOp::Send { local: None },
        };
        alloc.post_send(&[request]).map_err(|(_, e)| e).unwrap();
        let mut seen = Vec::new();
        while !seen
            .iter()
            .any(|wc: &WorkCompletion| wc.opcode == WcOpcode::Recv)
        {
            let wc = next(&ccq);
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            seen.push(wc);
        }
        let mut bytes = [0u8; GRANT_BYTES];
        buf.read(GRANT_BYTES * k as usize, &mut bytes).unwrap();
        let grant = ChunkGrant::decode(&bytes).unwrap();
        let r = &refills[k as usize];
        assert_eq!(grant, chains.grant(&arena, r.chunk, r.key).unwrap());
        grants.push(grant);
    }
    // Drain the remaining send completions of the requests.
    let mut wc = [WorkCompletion::default(); 8];
    while ccq.poll(&mut wc) > 0 {}

    // Each chunk through the access QP: a WRITE, then a READ of it back.
    for (k, g) in grants.iter().enumerate() {
        buf.write(1024, &[k as u8 + 1; 8]).unwrap();
        let write = SendWr {
            wr_id: 200,
            signaled: true,
            op: SendOp::Write {
                local: sge(1024, 8),
                remote_addr: g.addr,
                rkey: g.rkey,
            },
        };
        access.post_send(&[write]).map_err(|(_, e)| e).unwrap();
        assert_eq!(
            next(&ccq).status,
            WcStatus::Success,
            "chunk {k} on the access QP"
        );
    }
    // The node's memory has the writes (read directly, for the check).
    let mut chunk0 = [0u8; 8];
    arena.read(grants[0].addr, &mut chunk0).unwrap();
    assert_eq!(chunk0, [1; 8]);
    // The same key on another QP of the same client is refused by the NIC.
    let read = SendWr {
        wr_id: 300,
        signaled: true,
        op: SendOp::Read {
            local: sge(2048, 8),
            remote_addr: grants[0].addr,
            rkey: grants[0].rkey,
        },
    };
    other.post_send(&[read]).map_err(|(_, e)| e).unwrap();
    assert_eq!(next(&ccq).status, WcStatus::RemoteAccessError);

    // A fifth request finds no chain: receiver-not-ready until its retries run out.
    alloc
        .post_send(&[SendWr {
            wr_id: 9,
            signaled: true,
            op: SendOp::Send { local: None },
        }])
        .map_err(|(_, e)| e)
        .unwrap();
    assert_eq!(next(&ccq).status, WcStatus::RnrRetryExceeded);
    assert_eq!(alloc.state(), QpState::Error);

    // The manager's view, in the background: four binds done, the four chunks allocated.
    let (head, failed) = chains.head();
    assert_eq!((head, failed), (4, None));
    let seen = chunks.observe_head(1, head);
    assert_eq!(
        seen.allocated,
        refills.iter().map(|r| r.chunk).collect::<Vec<_>>()
    );
}

/// Slots filled again after their chains ran get chains that serve too: three rounds of a
/// four-slot queue, the manager's look at the head between rounds (which drains both CQs: an
/// undrained receive CQ overruns after four requests, and the fifth chain's WAIT would never
/// be satisfied).
#[test]
fn refilled_slots_serve_round_after_round() {
    let fabric = SoftFabric::new();
    let ctx = fabric.open_device(SoftConfig::default());
    let (npd, cpd) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
    let (ncq, ccq) = (ctx.create_cq(64).unwrap(), ctx.create_cq(64).unwrap());
    let arena = Arena::<P>::new(&ctx, 12, 4096).unwrap();
    let mut chains = AllocChains::<P>::new(&ctx, &npd, &arena, 4, QpTiming::default()).unwrap();
    let access_n = rc_qp(&npd, &ncq, 1);
    let policy = Arc::new(Handout(Mutex::new(
        [access_n.clone(), chains.qp().clone()].into(),
    )));
    let listener = ctx.listen(policy).unwrap();
    let addr = ctx.listener_address(&listener);
    let (access, alloc) = (rc_qp(&cpd, &ccq, 1), rc_qp(&cpd, &ccq, 8));
    access.connect(&addr, b"").unwrap();
    alloc.connect(&addr, b"").unwrap();
    let mut chunks = OneSidedChunks::new(12, 4);
    chunks.open(1, 12);
    let buf = ctx.alloc_buffer(4096).unwrap();
    let mr = cpd.reg_mr(&buf, 0, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let mut k = 0u64;
    for round in 0..3u64 {
        let (head, failed) = chains.head();
        chunks.observe_head(1, head);
        let refills = chunks.refill(1, u32::MAX);
        eprintln!(
            "round {round}: head {head} failed {failed:?} refills {}",
            refills.len()
        );
        for r in &refills {
            chains.post(&arena, r, access_n.qp_num()).unwrap();
        }
        for _ in 0..refills.len() {
            alloc
                .post_recv(&[RecvWr {
                    wr_id: 100 + k,
                    sge: Some(Sge {
                        addr: buf.addr() + 16 * (k % 8),
                        length: 16,
                        lkey: mr.lkey(),
                    }),
                }])
                .unwrap();
            alloc
                .post_send(&[SendWr {
                    wr_id: k,
                    signaled: true,
                    op: SendOp::Send { local: None },
                }])
                .map_err(|(_, e)| e)
                .unwrap();
            let mut got_recv = false;
            while !got_recv {
                let wc = next(&ccq);
                assert_eq!(wc.status, WcStatus::Success, "alloc {k}: {wc:?}");
                got_recv = wc.opcode == WcOpcode::Recv;
            }
            k += 1;
        }
    }
}

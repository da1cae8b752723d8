//! Type-2 binds for a named QP, a bind patched from a window table, and the allocation chain
//! they make together (OneSidedMW: a client's SEND allocates a chunk and gets its window's
//! address and key back, with no CPU of the memory node taking part).

use super::chains::{
    addr_key, chain_qp, cn_remote_mr, mn_remote_mr, post_on, ring_sge, skip_without_chains,
};
use super::harness::*;
use rnic::{
    BindInfo, CompletionQueue, CrossChannel, MemoryBuffer, MemoryKey, MemoryRegion, MemoryWindow,
    MwType, ProtectionDomain, Provider, QpNumber, QueuePair, RecvWr, SendOp, WcOpcode, WcStatus,
    wqe,
};

/// A type-2 bind for `target` over `len` bytes at MN `offset`.
fn bind_for<'a, P: Provider, B: TestBed<P>>(
    w: &'a World<P, B>,
    mw: &'a P::Mw,
    offset: usize,
    len: u64,
    target: QpNumber,
) -> SendOp<'a, P::Mw, P::Mr> {
    SendOp::BindMw {
        mw,
        bind: BindInfo {
            mr: Some(&w.mmr),
            addr: w.maddr(offset),
            length: len,
            access: RWA,
            key: None,
            target_qp: Some(target),
        },
    }
}

/// A type-2 window bound on one QP for another (same PD) works on the named QP only: the QP
/// the bind was posted on faults like any other QP. A SEND_WITH_INV arriving on the named QP
/// invalidates it (the window is FREE again: it binds anew).
pub fn bind_type2_for_named_qp<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "bind_type2_for_named_qp") {
        return;
    }
    let access = w.connect_with(ConnOpts {
        server_recvs: vec![RecvWr {
            wr_id: 1,
            sge: None,
        }],
        ..ConnOpts::default()
    });
    let poster = w.connect();
    let mw = w.mpd.alloc_mw(MwType::Type2).expect("alloc type-2 MW");
    let data = w.fill_mn(0x1000, 64, 5);
    let wc = poster.exec_server(&w.bed, bind_for(&w, &mw, 0x1000, 64, access.sqp.qp_num()));
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    let rkey = mw.rkey();
    let rd = w.read(&access, 0, 0x1000, 64, rkey);
    assert_eq!(rd.status, WcStatus::Success, "the named QP uses the window");
    assert_eq!(w.cn_bytes(0, 64), data);
    let denied = w.read(&poster, 0, 0x1000, 64, rkey);
    w.assert_access_error(&poster, &denied);

    let inv = access.exec(
        &w.bed,
        SendOp::SendWithInvalidate {
            local: None,
            invalidate: rkey,
        },
    );
    assert_eq!(inv.status, WcStatus::Success);
    let rc = wait_completions::<P, B>(&w.bed, access.srcq(), 1)[0];
    assert_eq!(
        (rc.status, rc.invalidated_rkey),
        (WcStatus::Success, Some(rkey))
    );
    let again = w.connect();
    let wc = again.exec_server(&w.bed, bind_for(&w, &mw, 0x1000, 64, access.sqp.qp_num()));
    assert_eq!(
        wc.status,
        WcStatus::Success,
        "the invalidated window is free"
    );
}

/// A bind for a named QP fails (`MwBindError`) when the QP is of another PD, in ERR, names
/// nothing on the device, or when the window is type 1.
pub fn bind_for_named_qp_errors<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "bind_for_named_qp_errors") {
        return;
    }
    let other_pd = w.connect_with(ConnOpts {
        server_pd: Some(w.mpd2.clone()),
        ..ConnOpts::default()
    });
    let failed = w.connect();
    failed.sqp.set_error();
    let cn_only = w.connect();
    let type2 = w.mpd.alloc_mw(MwType::Type2).expect("alloc type-2 MW");
    let type1 = w.mpd.alloc_mw(MwType::Type1).expect("alloc type-1 MW");
    let live = w.connect();
    let cases: [(&P::Mw, QpNumber, &str); 4] = [
        (&type2, other_pd.sqp.qp_num(), "a QP of another PD"),
        (&type2, failed.sqp.qp_num(), "a QP in ERR"),
        (
            &type2,
            cn_only.cqp.qp_num(),
            "a number of another device's QP",
        ),
        (&type1, live.sqp.qp_num(), "a type-1 window"),
    ];
    for (mw, target, what) in cases {
        let poster = w.connect();
        let wc = poster.exec_server(&w.bed, bind_for(&w, mw, 0x1000, 64, target));
        assert_eq!(wc.status, WcStatus::MwBindError, "bind for {what}");
    }
    // The failed binds left the type-2 window free: it binds for a valid target.
    let poster = w.connect();
    let wc = poster.exec_server(&w.bed, bind_for(&w, &type2, 0x1000, 64, live.sqp.qp_num()));
    assert_eq!(wc.status, WcStatus::Success);
}

/// A READ whose destination is a held BIND's window address and rkey binds the window the
/// table entry names, over the range it names, for the QP the bind names.
pub fn chain_read_patches_held_bind<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_read_patches_held_bind") {
        return;
    }
    let access = w.connect();
    let lb = chain_qp(&w, CrossChannel::default());
    let ring = lb
        .cqp
        .wqe_ring()
        .expect("a cross-channel QP has a WQE ring");
    let rmr = mn_remote_mr(&w);
    let posted_mw = w.mpd.alloc_mw(MwType::Type2).expect("alloc type-2 MW");
    let table_mw = w.mpd.alloc_mw(MwType::Type2).expect("alloc type-2 MW");
    let table_key = MemoryKey::new(table_mw.rkey().index(), 0x42);
    w.mbuf
        .write(0x8000, &addr_key(w.maddr(0x1000), table_key.0))
        .expect("write the table entry");
    let data = w.fill_mn(0x1000, 64, 8);
    // #0 READ → #2's window address and rkey; #1 WAIT for the READ; #2 BIND.
    post_on::<P>(
        &lb.cqp,
        &[
            wr::<P>(
                1,
                op_read::<P>(
                    ring_sge(&ring, 2, wqe::REMOTE_ADDR, 12),
                    w.maddr(0x8000),
                    rmr.rkey(),
                ),
            ),
            wr_unsignaled::<P>(
                2,
                SendOp::Wait {
                    cq: lb.ccq.cq_num(),
                    count: 1,
                },
            ),
            wr::<P>(
                3,
                SendOp::BindMw {
                    mw: &posted_mw,
                    bind: BindInfo {
                        mr: Some(&w.mmr),
                        addr: w.maddr(0x2000),
                        length: 64,
                        access: RWA,
                        key: Some(0x11),
                        target_qp: Some(access.sqp.qp_num()),
                    },
                },
            ),
        ],
    );
    let wcs = wait_completions::<P, B>(&w.bed, &lb.ccq, 2);
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (3, WcStatus::Success)]
    );
    let rd = w.read(&access, 0, 0x1000, 64, table_key);
    assert_eq!(rd.status, WcStatus::Success, "the window from the table");
    assert_eq!(w.cn_bytes(0, 64), data);
}

const CHUNK: usize = 0x1000;
const CHUNKS: usize = 0x4000;
const TABLE: usize = 0x8000;
const QUEUE: usize = 0x9000;
const HEAD: usize = 0x9100;
/// The free queue's order of table entries: allocation `k` gets chunk `FREE_ORDER[k]`.
const FREE_ORDER: [usize; 4] = [2, 0, 1, 3];
/// Where the client's requests and results are in `cbuf`.
const REQUESTS: usize = 0;
const RESULTS: usize = 0x400;

/// A memory node set up for the allocation chain (OneSidedMW's design): a type-2 window per
/// chunk, the window table `{chunk address, window rkey}`, the free queue of table-entry
/// addresses and its head; an access connection and an allocation connection from the CN,
/// and a loopback QP for the chain's MN-local steps.
struct AllocNode<P: Provider> {
    access: Conn<P>,
    alloc: Conn<P>,
    lb: Conn<P>,
    rmr: P::Mr,
    result_mr: P::Mr,
    windows: Vec<P::Mw>,
}

impl<P: Provider> AllocNode<P> {
    fn new<B: TestBed<P>>(w: &World<P, B>) -> Self {
        let node = AllocNode {
            access: w.connect(),
            alloc: w.connect_with(ConnOpts {
                server_cross: Some(CrossChannel::default()),
                ..ConnOpts::default()
            }),
            lb: chain_qp(w, CrossChannel::default()),
            rmr: mn_remote_mr(w),
            result_mr: cn_remote_mr(w),
            windows: (0..4)
                .map(|_| w.mpd.alloc_mw(MwType::Type2).expect("alloc type-2 MW"))
                .collect(),
        };
        for i in 0..4 {
            let entry = addr_key(w.maddr(CHUNKS + i * CHUNK), node.key(i).0);
            w.mbuf
                .write(TABLE + 16 * i, &entry)
                .expect("write the table");
        }
        for (slot, &i) in FREE_ORDER.iter().enumerate() {
            let entry_addr = w.maddr(TABLE + 16 * i);
            w.mbuf
                .write(QUEUE + 8 * slot, &entry_addr.to_le_bytes())
                .expect("write the free queue");
        }
        w.mbuf
            .write(HEAD, &w.maddr(QUEUE).to_le_bytes())
            .expect("write the head");
        node
    }

    /// The rkey the table gives chunk `i`'s window.
    fn key(&self, i: usize) -> MemoryKey {
        MemoryKey::new(self.windows[i].rkey().index(), 0x5a + i as u8)
    }

    /// Posts the chain for allocation `k` (the MN's only work, done in advance). Allocation
    /// QP: #3k WAIT, #3k+1 BIND, #3k+2 WRITE; receive `k` fills #3k+1's target QP and
    /// #3k+2's remote address and key (16 bytes across the two adjacent slots). Loopback QP:
    /// #6k WAIT for receive `k`, FAA on the head → #6k+3's address, WAIT, #6k+3 READ of the
    /// queue slot → #6k+5's address, WAIT, #6k+5 READ of the table entry → the BIND's window
    /// address and rkey.
    fn post_chain<B: TestBed<P>>(&self, w: &World<P, B>, k: u64) {
        let qring = self.alloc.sqp.wqe_ring().expect("allocation QP ring");
        let lring = self.lb.cqp.wqe_ring().expect("loopback QP ring");
        let (q, l) = (3 * k, 6 * k);
        self.alloc
            .sqp
            .post_recv(&[RecvWr {
                wr_id: k,
                sge: Some(ring_sge(&qring, q + 1, wqe::TARGET_QP, 16)),
            }])
            .expect("post the request receive");
        let wait = |id, cq: &P::Cq, count| {
            wr_unsignaled::<P>(
                id,
                SendOp::Wait {
                    cq: cq.cq_num(),
                    count,
                },
            )
        };
        let (lccq, rkey) = (&self.lb.ccq, self.rmr.rkey());
        post_on::<P>(
            &self.lb.cqp,
            &[
                wait(l, self.alloc.srcq(), k + 1),
                wr::<P>(
                    l + 1,
                    op_faa::<P>(
                        ring_sge(&lring, l + 3, wqe::REMOTE_ADDR, 8),
                        w.maddr(HEAD),
                        rkey,
                        8,
                    ),
                ),
                wait(l + 2, lccq, 3 * k + 1),
                wr::<P>(
                    l + 3,
                    op_read::<P>(ring_sge(&lring, l + 5, wqe::REMOTE_ADDR, 8), 0, rkey),
                ),
                wait(l + 4, lccq, 3 * k + 2),
                wr::<P>(
                    l + 5,
                    op_read::<P>(ring_sge(&qring, q + 1, wqe::REMOTE_ADDR, 12), 0, rkey),
                ),
            ],
        );
        post_on::<P>(
            &self.alloc.sqp,
            &[
                wait(q, lccq, 3 * k + 3),
                wr::<P>(
                    q + 1,
                    SendOp::BindMw {
                        mw: &self.windows[0],
                        bind: BindInfo {
                            mr: Some(&w.mmr),
                            addr: 0,
                            length: CHUNK as u64,
                            access: RWA,
                            key: Some(0),
                            target_qp: None,
                        },
                    },
                ),
                wr::<P>(
                    q + 2,
                    op_write::<P>(
                        ring_sge(&qring, q + 1, wqe::REMOTE_ADDR, 12),
                        0,
                        GARBAGE_RKEY,
                    ),
                ),
            ],
        );
    }

    /// The client's request `k`: one SEND of (access QP number, result address, result key).
    fn request<B: TestBed<P>>(&self, w: &World<P, B>, k: usize) {
        let mut request = self.access.sqp.qp_num().0.to_le_bytes().to_vec();
        let result = w.cbuf.addr() + (RESULTS + 16 * k) as u64;
        request.extend_from_slice(&addr_key(result, self.result_mr.rkey().0));
        w.cbuf
            .write(REQUESTS + 16 * k, &request)
            .expect("write the request");
        self.alloc.post(&[wr_unsignaled::<P>(
            k as u64,
            SendOp::Send {
                local: Some(w.csge(REQUESTS + 16 * k, 16)),
            },
        )]);
    }

    /// Waits (watching CN memory only) for result `k` and checks it names chunk `chunk`.
    fn expect_result<B: TestBed<P>>(&self, w: &World<P, B>, k: usize, chunk: usize) {
        let at = RESULTS + 16 * k;
        wait_until::<P, B>(&w.bed, "an allocation result on the CN", || {
            w.cn_bytes(at, 12) != vec![0; 12]
        });
        let expected = addr_key(w.maddr(CHUNKS + chunk * CHUNK), self.key(chunk).0);
        assert_eq!(w.cn_bytes(at, 12), expected.to_vec(), "allocation {k}");
    }
}

/// The allocation chain end to end, for one request. The MN posts once: on the allocation
/// QP a receive that scatters the client's request into the chain, a WAIT, a BIND and a
/// WRITE; on a loopback QP a WAIT for that receive, a FETCH_AND_ADD on the free queue's head,
/// a READ of the queue slot it returned and a READ of the window-table entry that slot names,
/// each patching the next. The client SENDs (access QP number, result address, result key)
/// and gets the chunk's address and window key, usable on its access QP only. No MN call
/// happens between posting and the client's result.
pub fn chain_mini_allocation<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_mini_allocation") {
        return;
    }
    let node = AllocNode::new(&w);
    let data = w.fill_mn(CHUNKS + 2 * CHUNK, 64, 4);
    node.post_chain(&w, 0);
    node.request(&w, 0);
    node.expect_result(&w, 0, FREE_ORDER[0]);

    // The chunk is the client's, through its access QP only.
    let key = node.key(2);
    let rd = w.read(&node.access, 0x1000, CHUNKS + 2 * CHUNK, 64, key);
    assert_eq!(rd.status, WcStatus::Success);
    assert_eq!(w.cn_bytes(0x1000, 64), data);
    let denied = w.read(&node.alloc, 0x1000, CHUNKS + 2 * CHUNK, 64, key);
    w.assert_access_error(&node.alloc, &denied);

    // Afterwards, the MN's view: the head moved one slot, every chain request succeeded.
    let mut head = [0u8; 8];
    w.mbuf.read(HEAD, &mut head).expect("read the head");
    assert_eq!(u64::from_le_bytes(head), w.maddr(QUEUE + 8));
    let lb_done = wait_completions::<P, B>(&w.bed, &node.lb.ccq, 3);
    assert!(lb_done.iter().all(|wc| wc.status == WcStatus::Success));
    let alloc_done = wait_completions::<P, B>(&w.bed, node.alloc.scq(), 2);
    assert_eq!(
        alloc_done
            .iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

/// Chains for several allocations posted in advance, and requests sent back to back without
/// waiting for results: each request gets the next chunk of the free queue, in order, and
/// every window works on the access QP.
pub fn chain_allocations_back_to_back<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_allocations_back_to_back") {
        return;
    }
    let node = AllocNode::new(&w);
    for k in 0..FREE_ORDER.len() as u64 {
        node.post_chain(&w, k);
    }
    for k in 0..FREE_ORDER.len() {
        node.request(&w, k);
    }
    for (k, &chunk) in FREE_ORDER.iter().enumerate() {
        node.expect_result(&w, k, chunk);
        let rd = w.read(
            &node.access,
            0x1000,
            CHUNKS + chunk * CHUNK,
            8,
            node.key(chunk),
        );
        assert_eq!(
            rd.status,
            WcStatus::Success,
            "chunk {chunk} on the access QP"
        );
    }
    let mut head = [0u8; 8];
    w.mbuf.read(HEAD, &mut head).expect("read the head");
    assert_eq!(
        u64::from_le_bytes(head),
        w.maddr(QUEUE + 8 * FREE_ORDER.len())
    );
}

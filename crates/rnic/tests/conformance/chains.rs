//! Work-request chains (`rnic::verbs::chain`): cross-channel WAIT and ENABLE, managed queues,
//! and held requests whose fields a RECV scatter or a READ patches through the WQE ring
//! (`docs/verbs-contract.md`, "Work-request chains"). Binds for a named QP and a complete
//! allocation chain are in `chain_alloc`.
//!
//! Every rule is skipped, loudly, on a device without `DeviceAttr::cross_channel`.

use super::harness::*;
use rnic::{
    AccessFlags, Clock, CompletionQueue, Context, CrossChannel, MemoryBuffer, MemoryRegion,
    ProtectionDomain, Provider, QpState, QpTiming, QueuePair, RealClock, RecvWr, SendOp, Sge,
    VerbsError, WcOpcode, WcStatus, WorkQueue, WqeRing, wqe,
};

/// How long a "nothing happens" check watches (wall clock; the chain engine is a thread).
const QUIET_US: u64 = 20_000;

/// Whether the bed's MN lacks chains (then the rule is skipped, saying so).
pub(super) fn skip_without_chains<P: Provider, B: TestBed<P>>(w: &World<P, B>, rule: &str) -> bool {
    let attr = w.mn().query_device();
    if attr.cross_channel && attr.mw_bind_target_qp {
        return false;
    }
    eprintln!("SKIPPED {rule}: the device has no cross-channel verbs (DeviceAttr::cross_channel)");
    true
}

/// An MN loopback connection whose client QP is cross-channel with `cross`.
pub(super) fn chain_qp<P: Provider, B: TestBed<P>>(
    w: &World<P, B>,
    cross: CrossChannel,
) -> Conn<P> {
    w.connect_with(ConnOpts {
        loopback: true,
        client_cross: Some(cross),
        ..ConnOpts::default()
    })
}

/// All of `mbuf` on `mpd` with every remote right (for loopback READ, WRITE, FAA).
pub(super) fn mn_remote_mr<P: Provider, B: TestBed<P>>(w: &World<P, B>) -> P::Mr {
    w.extra_mr(
        &w.mpd,
        0,
        BUF_LEN,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL,
    )
}

/// All of `cbuf` on `cpd`, writable by peers (where results land).
pub(super) fn cn_remote_mr<P: Provider, B: TestBed<P>>(w: &World<P, B>) -> P::Mr {
    w.cpd
        .reg_mr(
            &w.cbuf,
            0,
            BUF_LEN,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .expect("register CN result region")
}

/// A local SGE over `len` bytes of `field` in the ring entry of send request `index`.
pub(super) fn ring_sge(ring: &WqeRing, index: u64, field: usize, len: u32) -> Sge {
    Sge {
        addr: ring.field_addr(index, field),
        length: len,
        lkey: ring.lkey,
    }
}

/// Posts `wrs` on `qp`, failing the test if the post is refused.
pub(super) fn post_on<P: Provider>(qp: &P::Qp, wrs: &[Wr<'_, P>]) {
    if let Err((i, e)) = qp.post_send(wrs) {
        panic!("post_send refused WR #{i}: {e}");
    }
}

/// A window-table entry or a request's patch: an address and a key, little-endian.
pub(super) fn addr_key(addr: u64, key: u32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&addr.to_le_bytes());
    b[8..].copy_from_slice(&key.to_le_bytes());
    b
}

/// Watches `cq` (driving the bed) for a while and fails if anything completes on it.
pub(super) fn assert_quiet<P: Provider, B: TestBed<P>>(bed: &B, cq: &P::Cq, what: &str) {
    let clock = RealClock::new();
    let mut buf = [blank_wc(); 4];
    while clock.now().0 < QUIET_US {
        bed.drive();
        let n = cq.poll(&mut buf);
        assert_eq!(n, 0, "{what} ran while held: {:?}", &buf[..n]);
        std::thread::yield_now();
    }
}

/// A zero-byte receive.
fn empty_recv(wr_id: u64) -> RecvWr {
    RecvWr { wr_id, sge: None }
}

/// WAIT holds every later request of its send queue until the named CQ has produced the
/// count: a WRITE behind a WAIT for two receive completions runs after the second SEND only.
pub fn chain_wait_holds_until_count<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_wait_holds_until_count") {
        return;
    }
    let c = w.connect_with(ConnOpts {
        server_recvs: vec![empty_recv(1), empty_recv(2)],
        ..ConnOpts::default()
    });
    let lb = chain_qp(&w, CrossChannel::default());
    let rmr = mn_remote_mr(&w);
    let src = w.fill_mn(0x200, 8, 7);
    post_on::<P>(
        &lb.cqp,
        &[
            wr_unsignaled::<P>(
                1,
                SendOp::Wait {
                    cq: c.srcq().cq_num(),
                    count: 2,
                },
            ),
            wr::<P>(
                2,
                op_write::<P>(
                    sge(&w.mbuf, rmr.lkey(), 0x200, 8),
                    w.maddr(0x300),
                    rmr.rkey(),
                ),
            ),
        ],
    );
    let sent = c.exec(&w.bed, SendOp::Send { local: None });
    assert_eq!(sent.status, WcStatus::Success);
    assert_quiet::<P, B>(
        &w.bed,
        &lb.ccq,
        "a WRITE behind WAIT(count 2) after 1 completion",
    );
    assert_eq!(w.mn_bytes(0x300, 8), vec![0; 8]);

    let sent = c.exec(&w.bed, SendOp::Send { local: None });
    assert_eq!(sent.status, WcStatus::Success);
    let wc = wait_completions::<P, B>(&w.bed, &lb.ccq, 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, WcStatus::Success, WcOpcode::Write)
    );
    assert_eq!(w.mn_bytes(0x300, 8), src);
}

/// ENABLE lets a managed send queue run its requests below the index, and no further.
pub fn chain_enable_releases_up_to_index<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_enable_releases_up_to_index") {
        return;
    }
    let managed = chain_qp(
        &w,
        CrossChannel {
            managed_send: true,
            managed_recv: false,
        },
    );
    let enabler = chain_qp(&w, CrossChannel::default());
    let rmr = mn_remote_mr(&w);
    let src = w.fill_mn(0x200, 24, 3);
    let writes: Vec<Wr<'_, P>> = (0..3u64)
        .map(|i| {
            let off = 8 * i as usize;
            wr::<P>(
                i,
                op_write::<P>(
                    sge(&w.mbuf, rmr.lkey(), 0x200 + off, 8),
                    w.maddr(0x300 + off),
                    rmr.rkey(),
                ),
            )
        })
        .collect();
    post_on::<P>(&managed.cqp, &writes);
    assert_quiet::<P, B>(&w.bed, &managed.ccq, "a managed queue before any ENABLE");

    let enable = |id, index| {
        post_on::<P>(
            &enabler.cqp,
            &[wr::<P>(
                id,
                SendOp::Enable {
                    qp: managed.cqp.qp_num(),
                    queue: WorkQueue::Send,
                    index,
                },
            )],
        );
        let wc = wait_completions::<P, B>(&w.bed, &enabler.ccq, 1)[0];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (id, WcStatus::Success, WcOpcode::Enable)
        );
    };
    enable(10, 2);
    let done = wait_completions::<P, B>(&w.bed, &managed.ccq, 2);
    assert_eq!(
        done.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_quiet::<P, B>(&w.bed, &managed.ccq, "a request at the enable index");
    assert_eq!(w.mn_bytes(0x300, 16), src[..16].to_vec());
    assert_eq!(w.mn_bytes(0x310, 8), vec![0; 8]);

    enable(11, 3);
    let wc = wait_completions::<P, B>(&w.bed, &managed.ccq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    assert_eq!(w.mn_bytes(0x300, 24), src);
}

/// RECV_ENABLE: a managed receive queue gives incoming SENDs only the receives below its
/// enable index; the next SEND finds none (receiver not ready).
pub fn chain_enable_recv_up_to_index<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_enable_recv_up_to_index") {
        return;
    }
    let c = w.connect_with(ConnOpts {
        server_cross: Some(CrossChannel {
            managed_send: false,
            managed_recv: true,
        }),
        server_recvs: vec![empty_recv(1), empty_recv(2)],
        client_timing: Some(QpTiming {
            rnr_retry: 0,
            ..w.bed.quiet_timing()
        }),
        ..ConnOpts::default()
    });
    let enabler = chain_qp(&w, CrossChannel::default());
    post_on::<P>(
        &enabler.cqp,
        &[wr::<P>(
            7,
            SendOp::Enable {
                qp: c.sqp.qp_num(),
                queue: WorkQueue::Recv,
                index: 1,
            },
        )],
    );
    let wc = wait_completions::<P, B>(&w.bed, &enabler.ccq, 1)[0];
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::Enable)
    );

    let first = c.exec(&w.bed, SendOp::Send { local: None });
    assert_eq!(first.status, WcStatus::Success);
    let rc = wait_completions::<P, B>(&w.bed, c.srcq(), 1)[0];
    assert_eq!((rc.wr_id, rc.status), (1, WcStatus::Success));

    let second = c.exec(&w.bed, SendOp::Send { local: None });
    assert_eq!(
        second.status,
        WcStatus::RnrRetryExceeded,
        "receive #1 is posted but not enabled"
    );
}

/// A RECV whose scatter list names a held WRITE's remote address and rkey in the WQE ring
/// makes the WRITE go where the SEND said: the client's address and key arrive as data.
pub fn chain_recv_scatter_patches_held_write<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_recv_scatter_patches_held_write") {
        return;
    }
    let c = w.connect_with(ConnOpts {
        server_cross: Some(CrossChannel::default()),
        ..ConnOpts::default()
    });
    let result_mr = cn_remote_mr(&w);
    let ring = c.sqp.wqe_ring().expect("a cross-channel QP has a WQE ring");
    let src = w.fill_mn(0x200, 16, 9);
    // Request #0 is the WAIT, #1 the WRITE whose address and key the SEND fills in.
    c.sqp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sge: Some(ring_sge(&ring, 1, wqe::REMOTE_ADDR, 12)),
        }])
        .expect("post the patching receive");
    post_on::<P>(
        &c.sqp,
        &[
            wr_unsignaled::<P>(
                1,
                SendOp::Wait {
                    cq: c.srcq().cq_num(),
                    count: 1,
                },
            ),
            wr::<P>(
                2,
                op_write::<P>(sge(&w.mbuf, w.mmr.lkey(), 0x200, 16), 0, GARBAGE_RKEY),
            ),
        ],
    );
    let target = w.cbuf.addr() + 0x400;
    w.cbuf
        .write(0, &addr_key(target, result_mr.rkey().0))
        .expect("write the request");
    let sent = c.exec(
        &w.bed,
        SendOp::Send {
            local: Some(w.csge(0, 12)),
        },
    );
    assert_eq!(sent.status, WcStatus::Success);
    wait_until::<P, B>(&w.bed, "the patched WRITE to land on the CN", || {
        w.cn_bytes(0x400, 16) == src
    });
    let wc = wait_completions::<P, B>(&w.bed, c.scq(), 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, WcStatus::Success, WcOpcode::Write)
    );
}

/// A held request patched with a key that names nothing fails as any request would: it
/// completes in error, the QP enters ERR and the requests behind it are flushed.
pub fn chain_patched_bad_key_fails_qp<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_patched_bad_key_fails_qp") {
        return;
    }
    let c = w.connect_with(ConnOpts {
        server_cross: Some(CrossChannel::default()),
        ..ConnOpts::default()
    });
    let result_mr = cn_remote_mr(&w);
    let ring = c.sqp.wqe_ring().expect("a cross-channel QP has a WQE ring");
    c.sqp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sge: Some(ring_sge(&ring, 1, wqe::REMOTE_ADDR, 12)),
        }])
        .expect("post the patching receive");
    let good = |id| {
        wr::<P>(
            id,
            op_write::<P>(
                sge(&w.mbuf, w.mmr.lkey(), 0x200, 8),
                w.cbuf.addr() + 0x800,
                result_mr.rkey(),
            ),
        )
    };
    post_on::<P>(
        &c.sqp,
        &[
            wr_unsignaled::<P>(
                1,
                SendOp::Wait {
                    cq: c.srcq().cq_num(),
                    count: 1,
                },
            ),
            good(2),
            good(3),
        ],
    );
    w.cbuf
        .write(0, &addr_key(w.cbuf.addr() + 0x400, GARBAGE_RKEY.0))
        .expect("write the request");
    c.post(&[wr::<P>(
        9,
        SendOp::Send {
            local: Some(w.csge(0, 12)),
        },
    )]);
    let wcs = wait_completions::<P, B>(&w.bed, c.scq(), 2);
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        vec![
            (2, WcStatus::RemoteAccessError),
            (3, WcStatus::WrFlushError)
        ]
    );
    wait_state::<P, B>(&w.bed, &c.sqp, QpState::Error, "the chain's QP");
    assert_eq!(
        w.cn_bytes(0x800, 8),
        vec![0; 8],
        "the request behind it ran"
    );
    // The SEND was received (the WAIT passed); its acknowledgement races with the bad WRITE,
    // which fails the client's QP too, so the client may see it flushed instead.
    let sent = wait_completions::<P, B>(&w.bed, &c.ccq, 1)[0];
    assert_eq!(sent.wr_id, 9);
    assert!(
        matches!(sent.status, WcStatus::Success | WcStatus::WrFlushError),
        "{sent:?}"
    );
}

/// What is refused at post time: WAIT or ENABLE on an ordinary QP, a WAIT on a CQ of another
/// device, an ENABLE of a queue that is not managed.
pub fn chain_post_time_errors<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_post_time_errors") {
        return;
    }
    let ordinary = w.connect_with(ConnOpts {
        loopback: true,
        ..ConnOpts::default()
    });
    let chain = chain_qp(&w, CrossChannel::default());
    let refused = |qp: &P::Qp, op: SendOp<'_, P::Mw, P::Mr>, what: &str| match qp
        .post_send(&[wr::<P>(1, op)])
    {
        Err((0, VerbsError::InvalidArgument(_))) => {}
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    };
    let own_cq = chain.ccq.cq_num();
    refused(
        &ordinary.cqp,
        SendOp::Wait {
            cq: own_cq,
            count: 1,
        },
        "WAIT on an ordinary QP",
    );
    refused(
        &ordinary.cqp,
        SendOp::Enable {
            qp: chain.cqp.qp_num(),
            queue: WorkQueue::Send,
            index: 1,
        },
        "ENABLE on an ordinary QP",
    );
    let cn_cq = w.cn().create_cq(16).expect("a CN CQ");
    refused(
        &chain.cqp,
        SendOp::Wait {
            cq: cn_cq.cq_num(),
            count: 1,
        },
        "WAIT on a CQ of another device",
    );
    refused(
        &chain.cqp,
        SendOp::Enable {
            qp: ordinary.cqp.qp_num(),
            queue: WorkQueue::Send,
            index: 1,
        },
        "ENABLE of a queue that is not managed",
    );
    // Nothing was posted: the chain QP still works. In a list refused at its second request,
    // the first is posted and runs.
    let refused_second = chain.cqp.post_send(&[
        wr::<P>(
            9,
            SendOp::Wait {
                cq: own_cq,
                count: 0,
            },
        ),
        wr::<P>(
            10,
            SendOp::Wait {
                cq: cn_cq.cq_num(),
                count: 0,
            },
        ),
    ]);
    assert!(
        matches!(refused_second, Err((1, VerbsError::InvalidArgument(_)))),
        "{refused_second:?}"
    );
    let wc = wait_completions::<P, B>(&w.bed, &chain.ccq, 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (9, WcStatus::Success, WcOpcode::Wait)
    );
}

/// A QP that enters ERR flushes its held requests in posting order, a WAIT included, and a
/// request posted afterwards completes flushed behind them; none of them runs.
pub fn chain_error_flushes_held_requests<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_error_flushes_held_requests") {
        return;
    }
    let lb = chain_qp(&w, CrossChannel::default());
    let never = w.mn().create_cq(16).expect("a CQ nothing completes on");
    let rmr = mn_remote_mr(&w);
    w.fill_mn(0x200, 8, 5);
    let write = |id| {
        wr::<P>(
            id,
            op_write::<P>(
                sge(&w.mbuf, rmr.lkey(), 0x200, 8),
                w.maddr(0x300),
                rmr.rkey(),
            ),
        )
    };
    post_on::<P>(
        &lb.cqp,
        &[
            wr_unsignaled::<P>(
                1,
                SendOp::Wait {
                    cq: never.cq_num(),
                    count: 1,
                },
            ),
            write(2),
            write(3),
        ],
    );
    assert_quiet::<P, B>(
        &w.bed,
        &lb.ccq,
        "requests behind a WAIT that is never reached",
    );
    lb.cqp.set_error();
    post_on::<P>(&lb.cqp, &[write(4)]);
    let wcs = wait_completions::<P, B>(&w.bed, &lb.ccq, 4);
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status, wc.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::WrFlushError, WcOpcode::Wait),
            (2, WcStatus::WrFlushError, WcOpcode::Write),
            (3, WcStatus::WrFlushError, WcOpcode::Write),
            (4, WcStatus::WrFlushError, WcOpcode::Write),
        ]
    );
    assert_eq!(w.mn_bytes(0x300, 8), vec![0; 8]);
}

/// A SEND answered receiver-not-ready because its receive was not enabled yet goes through
/// once an ENABLE lets the receive be used: the sender's RNR retry finds it (on TCP the
/// responder reads the peer's requests again when the ENABLE runs, as after a `post_recv`).
pub fn chain_enable_recv_after_rnr<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    if skip_without_chains(&w, "chain_enable_recv_after_rnr") {
        return;
    }
    let rnr_timer_us = 2_000;
    let c = w.connect_with(ConnOpts {
        server_cross: Some(CrossChannel {
            managed_send: false,
            managed_recv: true,
        }),
        server_recvs: vec![empty_recv(1)],
        client_timing: Some(QpTiming {
            rnr_timer_us,
            rnr_retry: 7,
            ..w.bed.quiet_timing()
        }),
        ..ConnOpts::default()
    });
    let enabler = chain_qp(&w, CrossChannel::default());
    c.post(&[wr::<P>(5, SendOp::Send { local: None })]);
    // The SEND reaches the MN and is refused; on virtual time no retry can run yet.
    for _ in 0..8 {
        w.bed.drive();
    }
    if w.bed.virtual_time() {
        assert!(poll_now::<P, B>(&w.bed, &c.ccq).is_empty());
        assert!(poll_now::<P, B>(&w.bed, c.srcq()).is_empty());
    }
    post_on::<P>(
        &enabler.cqp,
        &[wr::<P>(
            6,
            SendOp::Enable {
                qp: c.sqp.qp_num(),
                queue: WorkQueue::Recv,
                index: 1,
            },
        )],
    );
    let wc = wait_completions::<P, B>(&w.bed, &enabler.ccq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (6, WcStatus::Success));
    let step = Some(std::time::Duration::from_micros(rnr_timer_us / 4));
    let sent = wait_completions_advancing::<P, B>(&w.bed, &c.ccq, 1, step)[0];
    assert_eq!((sent.wr_id, sent.status), (5, WcStatus::Success));
    let rc = wait_completions::<P, B>(&w.bed, c.srcq(), 1)[0];
    assert_eq!((rc.wr_id, rc.status), (1, WcStatus::Success));
}

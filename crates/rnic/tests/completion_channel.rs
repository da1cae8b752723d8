//! Completion channels: CQs created on a channel raise one event per arming when they get a
//! completion, and a waiter on the channel wakes for any of them (`ibv_req_notify_cq` +
//! `ibv_get_cq_event` semantics). In process, single-threaded: the inline link completes a
//! WRITE before `post_send` returns, so every step is deterministic.
#![allow(clippy::unwrap_used)]

use parking_lot::Mutex;
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;
use std::time::Duration;

struct Accept {
    pd: SoftPd,
    cq: SoftCq,
    got: Mutex<Vec<SoftQp>>,
}

impl AcceptPolicy<SoftProvider> for Accept {
    fn create_qp(&self, _: &[u8]) -> Result<SoftQp, String> {
        self.pd
            .create_qp(QpInit {
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                max_send_wr: 16,
                max_recv_wr: 16,
                access: AccessFlags::REMOTE_ALL,
                timing: QpTiming::default(),
            })
            .map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, _: &[u8]) {
        self.got.lock().push(qp);
    }
}

/// Two client QPs, each with its own CQ on one channel, connected to a node whose memory
/// they may write.
struct Bed {
    channel: SoftChannel,
    cqs: [SoftCq; 2],
    qps: [SoftQp; 2],
    local: (SoftBuffer, SoftMr),
    remote: (SoftBuffer, SoftMr),
    _listener: SoftListener,
    _accept: Arc<Accept>,
}

fn bed() -> Bed {
    let fabric = SoftFabric::new();
    let (mn, cn) = (
        fabric.open_device(SoftConfig::default()),
        fabric.open_device(SoftConfig::default()),
    );
    let mpd = mn.alloc_pd().unwrap();
    let accept = Arc::new(Accept {
        pd: mpd.clone(),
        cq: mn.create_cq(64).unwrap(),
        got: Mutex::new(Vec::new()),
    });
    let listener = mn.listen(accept.clone()).unwrap();
    let rbuf = mn.alloc_buffer(4096).unwrap();
    let rmr = mpd
        .reg_mr(
            &rbuf,
            0,
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL,
        )
        .unwrap();
    let channel = cn.create_channel().unwrap();
    let cpd = cn.alloc_pd().unwrap();
    let cqs = [
        cn.create_cq_on(16, &channel).unwrap(),
        cn.create_cq_on(16, &channel).unwrap(),
    ];
    let qps = cqs.clone().map(|cq| {
        let qp = cpd
            .create_qp(QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                max_send_wr: 16,
                max_recv_wr: 16,
                access: AccessFlags::empty(),
                timing: QpTiming::default(),
            })
            .unwrap();
        qp.connect(&mn.listener_address(&listener), b"c").unwrap();
        qp
    });
    let lbuf = cn.alloc_buffer(4096).unwrap();
    let lmr = cpd
        .reg_mr(&lbuf, 0, 4096, AccessFlags::LOCAL_WRITE)
        .unwrap();
    Bed {
        channel,
        cqs,
        qps,
        local: (lbuf, lmr),
        remote: (rbuf, rmr),
        _listener: listener,
        _accept: accept,
    }
}

impl Bed {
    /// A signaled 8-byte WRITE on QP `i` (complete when this returns: inline link).
    fn write(&self, i: usize) {
        self.qps[i]
            .post_send(&[SendWr {
                wr_id: i as u64,
                signaled: true,
                op: SendOp::Write {
                    local: Sge {
                        addr: self.local.0.addr(),
                        length: 8,
                        lkey: self.local.1.lkey(),
                    },
                    remote_addr: self.remote.0.addr(),
                    rkey: self.remote.1.rkey(),
                },
            }])
            .unwrap();
    }

    fn drain(&self, i: usize) -> usize {
        let mut wcs = [WorkCompletion::default(); 8];
        self.cqs[i].poll(&mut wcs)
    }
}

#[test]
fn an_unarmed_cq_raises_no_event() {
    let b = bed();
    b.write(0);
    assert_eq!(b.drain(0), 1, "the completion is queued");
    assert!(
        !b.channel.wait(Duration::ZERO),
        "but no event: the CQ was not armed"
    );
}

#[test]
fn an_armed_cq_raises_one_event_per_arming() {
    let b = bed();
    b.cqs[0].req_notify();
    b.write(0);
    assert!(
        b.channel.wait(Duration::ZERO),
        "the armed CQ's completion raised an event"
    );
    assert!(!b.channel.wait(Duration::ZERO), "the event was consumed");
    b.write(0);
    assert!(
        !b.channel.wait(Duration::ZERO),
        "the event disarmed the CQ: no event until it is armed again"
    );
    assert_eq!(b.drain(0), 2, "both completions are queued regardless");
    b.cqs[0].req_notify();
    b.write(0);
    assert!(b.channel.wait(Duration::ZERO));
}

#[test]
fn one_channel_wakes_for_any_of_its_cqs() {
    let b = bed();
    b.cqs[0].req_notify();
    b.cqs[1].req_notify();
    b.write(1);
    assert!(
        b.channel.wait(Duration::ZERO),
        "the second CQ's completion woke the channel"
    );
    assert_eq!((b.drain(0), b.drain(1)), (0, 1));
    b.write(0);
    assert!(b.channel.wait(Duration::ZERO), "the first is still armed");
}

#[test]
fn a_waiter_sleeps_until_a_completion_from_another_thread() {
    let b = bed();
    b.cqs[1].req_notify();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| b.channel.wait(Duration::from_secs(10)));
        // Whether the waiter is asleep yet or not, the event is counted and wakes it.
        b.write(1);
        assert!(waiter.join().unwrap());
    });
}

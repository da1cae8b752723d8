//! The control path's decisions on a virtual timeline, without a network: each test plays
//! the memory node by hand (taking the core's sends and feeding replies back).

use super::*;
use crate::proto::messages::PermissionId;
use rnic::MemoryKey;

const TIMEOUT: Duration = Duration::from_millis(100);

fn core(shards: usize) -> ClientCore {
    let cfg = ClientConfig {
        rpc_timeout: TIMEOUT,
        lease_slack_rtts: 0,
        ..ClientConfig::default()
    };
    let mut c = ClientCore::new(&cfg, 4, 7);
    c.begin_session(0);
    let map = ShardMap::split(shards, 0x1000, 64, 0x10_0000, 1 << 20, 4096).unwrap();
    c.session_opened(map, 0, 10_000_000);
    c
}

fn at(us: u64) -> Now {
    Now::both(Timestamp(us))
}

fn sends(c: &mut ClientCore) -> Vec<Transmit> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

fn grant(header: u64) -> Reply {
    Reply::Granted(Grant {
        id: PermissionId {
            header_addr: header,
            start_us: 1,
        },
        buffer_addr: 0x10_0000,
        buffer_len: 64,
        buffer_rkey: MemoryKey(1),
        lifetime_rkey: MemoryKey(2),
        lifetime_us: 1_000,
        max_lifetime_us: 10_000,
        contiguous: true,
    })
}

/// The reply a call ended with.
fn reply(c: &mut ClientCore, id: u64) -> Reply {
    match c.take_outcome(id) {
        Some(Ok(r)) => r,
        other => panic!("{other:?}"),
    }
}

fn alloc() -> Request {
    Request::Allocate {
        size: 64,
        lease_us: 1_000,
        mode: Mode::Shared,
    }
}

#[test]
fn a_call_is_retried_once_under_its_id_and_the_duplicate_answer_is_a_stray() {
    let mut c = core(1);
    let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
    let first = sends(&mut c);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, id);
    assert_eq!(c.poll_timeout(), Some(Timestamp(50_000)), "retry at half");
    c.handle_timeout(at(50_000));
    let retry = sends(&mut c);
    assert_eq!(retry, first, "the same id, the same request");
    c.handle_timeout(at(60_000));
    assert!(sends(&mut c).is_empty(), "one retry only");
    c.on_reply(0, id, grant(0x1000), at(70_000));
    assert_eq!(reply(&mut c, id), grant(0x1000));
    c.on_reply(0, id, grant(0x1000), at(71_000));
    assert_eq!(c.counts().strays, 1, "the retry's answer is a duplicate");
    assert_eq!(c.counts().resent, 1);
    assert!(
        sends(&mut c).is_empty(),
        "a duplicate grant is not handed back"
    );
}

#[test]
fn a_grant_after_the_deadline_is_handed_back_and_its_memory_freed() {
    let mut c = core(1);
    let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
    sends(&mut c);
    c.handle_timeout(at(50_000));
    sends(&mut c);
    c.handle_timeout(at(100_000));
    assert!(matches!(
        c.take_outcome(id),
        Some(Err(ClientError::RpcTimeout))
    ));
    c.on_reply(0, id, grant(0x1040), at(120_000));
    let back = sends(&mut c);
    assert_eq!(back.len(), 1);
    assert_eq!(
        back[0].request,
        Request::Revoke {
            id: PermissionId {
                header_addr: 0x1040,
                start_us: 1
            },
            free: true
        }
    );
    // The hand-back's own answer is expected; the retry's copy of the grant is a duplicate.
    c.on_reply(0, back[0].id, Reply::Revoked, at(130_000));
    c.on_reply(0, id, grant(0x1040), at(131_000));
    assert_eq!(c.counts().strays, 1);
    assert!(sends(&mut c).is_empty(), "handed back once");
}

#[test]
fn an_abandoned_acquire_hands_back_a_late_grant_without_freeing() {
    let mut c = core(1);
    let owner = Owner::Grant {
        access: Access::Read,
        mode: Mode::Shared,
        sent: Timestamp(0),
    };
    let req = Request::Acquire {
        addr: 0x10_0000,
        size: 64,
        lease_us: 1_000,
        access: Access::Read,
        mode: Mode::Shared,
        wait_us: 0,
    };
    let id = c.start(req, owner, at(0)).unwrap();
    sends(&mut c);
    c.abandon(id, at(0));
    c.on_reply(0, id, grant(0x1000), at(10));
    let back = sends(&mut c);
    assert!(matches!(
        back[..],
        [Transmit {
            request: Request::Revoke { free: false, .. },
            ..
        }]
    ));
}

#[test]
fn an_allocation_a_shard_cannot_serve_tries_the_next_under_a_new_id() {
    let mut c = core(3);
    let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
    let s1 = sends(&mut c);
    c.on_reply(
        s1[0].channel,
        s1[0].id,
        Reply::Failed(Status::NoMemory),
        at(10),
    );
    let s2 = sends(&mut c);
    assert_eq!(s2.len(), 1);
    assert_ne!(s2[0].channel, s1[0].channel);
    assert_ne!(s2[0].id, s1[0].id);
    c.on_reply(
        s2[0].channel,
        s2[0].id,
        Reply::Failed(Status::NoMemory),
        at(20),
    );
    let s3 = sends(&mut c);
    c.on_reply(
        s3[0].channel,
        s3[0].id,
        Reply::Failed(Status::QuotaExceeded),
        at(30),
    );
    assert!(sends(&mut c).is_empty(), "every shard tried once");
    assert_eq!(reply(&mut c, id), Reply::Failed(Status::QuotaExceeded));
}

#[test]
fn overloaded_backs_off_on_the_timer_and_gives_up_by_the_deadline() {
    let mut c = core(1);
    let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
    let mut now = 0;
    let mut attempts = 0;
    loop {
        let s = sends(&mut c);
        if s.is_empty() {
            break;
        }
        attempts += 1;
        c.on_reply(0, s[0].id, Reply::Failed(Status::Overloaded), at(now));
        if c.is_done(id) {
            break;
        }
        let wake = c.poll_timeout().expect("a back-off is a deadline");
        assert!(wake.0 > now, "a back-off waits");
        now = wake.0;
        c.handle_timeout(at(now));
    }
    assert!(attempts > 3, "doubling back-off from 50 µs: {attempts}");
    assert!(now < TIMEOUT.as_micros() as u64, "within the timeout");
    assert_eq!(reply(&mut c, id), Reply::Failed(Status::Overloaded));
    assert_eq!(c.stats().overloaded, attempts);
}

#[test]
fn without_a_slot_a_call_queues_until_one_frees_or_its_deadline() {
    let mut c = core(1);
    let ids: Vec<u64> = (0..4)
        .map(|_| c.start(alloc(), Owner::Reply, at(0)).unwrap())
        .collect();
    assert_eq!(sends(&mut c).len(), 4);
    let queued = c.start(alloc(), Owner::Reply, at(1)).unwrap();
    let starved = c.start(alloc(), Owner::Reply, at(2)).unwrap();
    assert!(sends(&mut c).is_empty(), "no slot: queued");
    c.on_reply(0, ids[0], grant(0x1000), at(3));
    let s = sends(&mut c);
    assert_eq!(s.len(), 1, "a slot freed: the oldest queued call goes");
    assert_eq!(c.next_ended(), Some(ids[0]));
    assert_eq!(reply(&mut c, ids[0]), grant(0x1000));
    // No slot frees before the last one's deadline: it ends without ever being sent.
    c.handle_timeout(at(2 + TIMEOUT.as_micros() as u64));
    assert!(matches!(
        c.take_outcome(starved),
        Some(Err(ClientError::ControlBusy))
    ));
    assert!(sends(&mut c).is_empty());
    c.on_reply(0, s[0].id, grant(0x1040), at(4));
    assert_eq!(reply(&mut c, queued), grant(0x1040));
}

#[test]
fn a_channel_owed_only_answers_nobody_waits_for_is_wedged() {
    let mut c = core(1);
    for _ in 0..4 {
        let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
        c.abandon(id, at(0));
    }
    sends(&mut c);
    assert!(matches!(
        c.start(alloc(), Owner::Reply, at(1)),
        Err(ClientError::RpcTimeout)
    ));
    assert!(c.is_lost(), "the session is replaced");
}

#[test]
fn a_lost_session_ends_every_waiting_call_as_unknown_and_nothing_is_resent() {
    let mut c = core(1);
    let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
    sends(&mut c);
    c.lose_session(WcStatus::RetryExceeded);
    assert_eq!(c.next_ended(), Some(id), "it ended");
    assert!(matches!(
        c.take_outcome(id),
        Some(Err(ClientError::ControlLost(WcStatus::RetryExceeded)))
    ));
    c.handle_timeout(at(1_000_000));
    assert!(sends(&mut c).is_empty());
    c.begin_session(1);
    c.on_reply(0, id, grant(0x1000), at(1_000_001));
    assert_eq!(c.counts().strays, 1, "an old session's answer is a stray");
}

#[test]
fn answers_from_nowhere_change_nothing() {
    let mut c = core(2);
    let id = c.start(alloc(), Owner::Reply, at(0)).unwrap();
    let s = sends(&mut c);
    c.on_reply(s[0].channel, 999, grant(0x1000), at(1));
    let other = 1 - s[0].channel;
    c.on_reply(other, s[0].id, grant(0x1000), at(1));
    assert_eq!(c.counts().strays, 2);
    assert!(!c.is_done(id));
    c.on_reply(s[0].channel, s[0].id, grant(0x1000), at(2));
    assert!(c.is_done(id));
}

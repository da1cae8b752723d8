//! A client that keeps faulting (each access fault costs it a QP, which it
//! reconnects, and the node the reconnection) is throttled past its tenant's fault budget:
//! its reconnections are refused until the budget refills, while the honest tenant is served
//! throughout. Deliberate-fault experiments stay within the default budget (Table 5 makes
//! about 200 faults).

use super::*;
use patronus_core::client::{Client, ClientError};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, NodeLimits};
use patronus_core::proto::messages::Mode;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

const FAULTER: (u32, u64) = (1, 0xfa17);
const HONEST: (u32, u64) = (2, 0x2222);
const BURST: u32 = 12;

fn faults(t: Link, iso: Isolation) {
    let node = NodeConfig {
        tenants: serving(&[FAULTER, HONEST]),
        limits: NodeLimits {
            fault_burst: BURST,
            faults_per_s: 100,
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    let mut b = bed(t, iso, 1, node, as_tenant(HONEST));
    honest_round(&mut b);
    let start = footprint(&b);
    let ctx = b.cluster.client_ctxs[0].clone();
    let mut faulter =
        Client::<SoftProvider>::connect(&ctx, b.cluster.node.address(), as_tenant(FAULTER))
            .unwrap();
    let p = faulter
        .allocate(64, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    // It faults on purpose, over and over (a key sweep would).
    let mut denied = 0;
    let mut stopped = None;
    for _ in 0..4 * BURST {
        let mut bad = p.forged_copy();
        bad.corrupt_rkey();
        match faulter.write(&bad, 0, b"x") {
            Err(ClientError::Denied(_)) => denied += 1,
            Err(e) => {
                stopped = Some(e);
                break;
            }
            Ok(()) => panic!("a forged rkey worked"),
        }
        honest_round(&mut b);
    }
    let s = wait_for(&b, "refused reconnections", |s| s.reconnects_refused > 0);
    assert!(
        stopped.is_some() && denied >= BURST as usize,
        "the faulter was throttled after its budget: {denied} faults, then {stopped:?}; {s:?}"
    );
    assert!(s.data_reconnects > u64::from(BURST), "{s:?}");
    honest_round(&mut b);
    // The budget refills with time (virtual, 100 faults a second: 200 ms are 20 faults'
    // worth), and the faulter works again.
    b.clock.advance(Duration::from_millis(200));
    let mut buf = [0u8; 8];
    let mut errors = Vec::new();
    for _ in 0..8 {
        match faulter.read(&p, 0, &mut buf) {
            Ok(()) => break,
            Err(e) => errors.push(e),
        }
    }
    assert!(
        errors.len() < 8,
        "the faulter works again once its budget refilled: {stopped:?} then {errors:?}"
    );
    faulter.free(p).unwrap();
    drop(faulter);
    honest_round(&mut b);
    wait_back_to(&b, start, 0);
}

every_mode! {
    a_client_that_keeps_faulting_is_throttled => faults;
}

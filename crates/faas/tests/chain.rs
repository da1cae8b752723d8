//! The chain machinery on its own, on both transports: a chain of several inputs gets them in
//! the invocation's order (acquired together: all sent before any answer is awaited); an
//! output larger than the chain reserved gets an object of its own and the reserved one is
//! freed; every right ends on exit and no object but the outputs stays.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{live_objects, live_permissions};

use patronus_core::cluster::{EmbeddedCluster, Transport};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use patronus_faas::{Chain, ChainCtx, Datum, FaasError, Input, Invocation, run_chain};
use patronus_ods::{PatronusMemory, RemoteMemory};
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::Duration;

type Mem = PatronusMemory<SoftProvider>;

const LEASE: Duration = Duration::from_secs(2);
const INPUTS: usize = 5;

/// Reads every input's first 8 bytes, in input order.
fn gather(ctx: &mut ChainCtx<'_, Mem>, _p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let mut out = Vec::new();
    for i in 0..INPUTS {
        out.extend(ctx.read(i, 0, 8)?);
    }
    Ok(out)
}

/// Leaves what it got, four times over, as the output (160 bytes: more than the chain
/// reserved, even rounded up to an allocation class).
fn respond(ctx: &mut ChainCtx<'_, Mem>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    ctx.output(&p.repeat(4))?;
    Ok(p)
}

fn chain() -> Chain<Mem> {
    Chain {
        name: "gather",
        functions: vec![("gather", gather), ("respond", respond)],
        output_reserve: Some(8),
    }
}

fn several_inputs_in_order(t: Transport) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..NodeConfig::default()
    };
    let mut c = EmbeddedCluster::start(
        t,
        SoftConfig::default(),
        node,
        patronus_core::client::ClientConfig::default(),
        2,
    )
    .unwrap();
    let mut setup: Mem = PatronusMemory::new(c.clients.remove(0));
    let mut mem: Mem = PatronusMemory::new(c.clients.remove(0));
    let inputs: Vec<Input> = (0..INPUTS as u64)
        .map(|i| {
            let r = setup
                .allocate(&[64], LEASE, Mode::Shared)
                .unwrap()
                .pop()
                .unwrap();
            setup.write(&r, 0, &(i * 11).to_le_bytes()).unwrap();
            let d = Datum {
                addr: r.addr(),
                len: r.len(),
            };
            setup.release(r).unwrap();
            Input::read(d)
        })
        .collect();
    let (permissions, objects) = (live_permissions(&c), live_objects(&c));
    let inv = Invocation {
        inputs: inputs.clone(),
        payload: Vec::new(),
    };
    let report = run_chain(&mut mem, &chain(), &inv, LEASE).unwrap();
    let expected: Vec<u8> = (0..INPUTS as u64)
        .flat_map(|i| (i * 11).to_le_bytes())
        .collect();
    assert_eq!(report.result, expected, "inputs in the invocation's order");
    assert_eq!(report.acquires, INPUTS as u64);
    assert_eq!(
        report.allocates, 2,
        "the reservation, and an object for the larger output"
    );
    assert_eq!(
        report.releases,
        INPUTS as u64 + 2,
        "every input, the output, and the unused reservation (freed)"
    );
    assert_eq!(live_permissions(&c), permissions, "every right ended");
    assert_eq!(
        live_objects(&c),
        objects + 1,
        "the output stays; the reservation does not"
    );
    let out = report.outputs[0];
    assert_eq!(out.len, 4 * expected.len() as u64);
    let r = setup
        .acquire(out.addr, out.len, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    assert_eq!(
        setup.read(&r, 0, out.len as u32).unwrap(),
        expected.repeat(4)
    );
    setup.release(r).unwrap();

    // An input that is not there: the chain fails on bootstrap, and what it got is given back.
    let mut missing = inputs;
    missing[2] = Input::read(Datum {
        addr: missing[2].datum.addr + (1 << 20),
        len: 64,
    });
    let err = run_chain(
        &mut mem,
        &chain(),
        &Invocation {
            inputs: missing,
            payload: Vec::new(),
        },
        LEASE,
    )
    .unwrap_err();
    assert!(matches!(err, FaasError::Memory(_)), "{err:?}");
    assert_eq!(live_permissions(&c), permissions, "every right ended");
    assert_eq!(live_objects(&c), objects + 1, "nothing more stays");
}

both_transports!(several_inputs_in_order);

//! The chain machinery on its own, on both transports: a chain of several inputs gets them in
//! the invocation's order (acquired together: all sent before any answer is awaited); an
//! output larger than the chain reserved gets an object of its own and the reserved one is
//! freed; every right ends on exit and no object but the outputs stays. A function that
//! reaches outside what it was handed (past an input's end, an input it does not have) gets
//! a clear refusal, and the chain still gives every right back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{live_objects, live_permissions};

use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use patronus_faas::{Chain, ChainCtx, Datum, FaasError, Function, Input, Invocation, run_chain};
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

fn several_inputs_in_order(t: Link) {
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

/// Reads 8 bytes across the end of input 0.
fn past_the_end(ctx: &mut ChainCtx<'_, Mem>, _p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let len = ctx.input(0)?.len;
    ctx.read(0, len - 4, 8)
}

/// Writes to input 0 far past its end (an address beyond it: the next object's, say).
fn write_beyond(ctx: &mut ChainCtx<'_, Mem>, _p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    ctx.write(0, 4096, b"not mine")?;
    Ok(Vec::new())
}

/// An atomic on an input the invocation does not have.
fn not_handed(ctx: &mut ChainCtx<'_, Mem>, _p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    ctx.faa(1, 0, 1)?;
    Ok(Vec::new())
}

fn outside_what_it_was_handed(t: Link) {
    let mut c = EmbeddedCluster::start(
        t,
        SoftConfig::default(),
        NodeConfig {
            max_lifetime_us: 60_000_000,
            ..NodeConfig::default()
        },
        patronus_core::client::ClientConfig::default(),
        2,
    )
    .unwrap();
    let mut setup: Mem = PatronusMemory::new(c.clients.remove(0));
    let mut mem: Mem = PatronusMemory::new(c.clients.remove(0));
    // Two objects side by side; the chain is handed the first, read-write.
    let objs = setup.allocate(&[64, 64], LEASE, Mode::Shared).unwrap();
    for o in &objs {
        setup.write(o, 0, &[0x5a; 64]).unwrap();
    }
    let input = Input::read_write(Datum {
        addr: objs[0].addr(),
        len: 64,
    });
    let permissions = live_permissions(&c);
    let refusals: [(&str, Function<Mem>); 3] = [
        ("past the end", past_the_end),
        ("write beyond", write_beyond),
        ("not handed", not_handed),
    ];
    for (what, f) in refusals {
        let chain = Chain {
            name: "outside",
            functions: vec![(what, f)],
            output_reserve: None,
        };
        let inv = Invocation {
            inputs: vec![input],
            payload: Vec::new(),
        };
        let err = run_chain(&mut mem, &chain, &inv, LEASE).unwrap_err();
        match what {
            "not handed" => assert_eq!(err, FaasError::NoInput(1)),
            _ => assert!(
                matches!(
                    err,
                    FaasError::OutOfBounds {
                        input: 0,
                        len: 64,
                        ..
                    }
                ),
                "{what}: {err:?}"
            ),
        }
        assert!(err.to_string().contains("input"), "a clear message: {err}");
        assert_eq!(
            live_permissions(&c),
            permissions,
            "{what}: every right ended"
        );
    }
    for o in &objs {
        assert_eq!(
            setup.read(o, 0, 64).unwrap(),
            vec![0x5a; 64],
            "nothing was touched"
        );
    }
}

patronus_core::both_transports!(several_inputs_in_order, outside_what_it_was_handed);

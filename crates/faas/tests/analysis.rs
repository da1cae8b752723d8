//! The data-analysis chain on warm containers, on both transports: every chain's analysis
//! is right (it counts its own record), a final one equals the analysis computed directly,
//! outputs are readable by their consumer, each chain made exactly one acquire, one allocate
//! and two releases, and the node holds no permission of theirs afterwards. A container of
//! another tenant cannot get at the table, nor use another container's rkey (the NIC refuses
//! it). Bad input is refused with a clear error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{live_objects, live_permissions};

use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::{NodeConfig, TenantSecret};
use patronus_core::proto::messages::{Access, Mode};
use patronus_faas::apps::analysis::{self, Analysis, Employee};
use patronus_faas::{Datum, Done, FaasError, Runtime};
use patronus_ods::{MemError, PatronusMemory, RemoteMemory};
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::Duration;

type Mem = PatronusMemory<SoftProvider>;

const LEASE: Duration = Duration::from_secs(2);
const TENANT_A: TenantSecret = TenantSecret {
    tenant: 1,
    secret: 0xa11ce,
};
const TENANT_B: TenantSecret = TenantSecret {
    tenant: 2,
    secret: 0xb0b,
};

fn as_tenant(t: TenantSecret) -> ClientConfig {
    ClientConfig {
        tenant: t.tenant,
        tenant_secret: t.secret,
        ..ClientConfig::default()
    }
}

fn cluster(t: Link) -> EmbeddedCluster {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        tenants: vec![TENANT_A, TENANT_B],
        ..NodeConfig::default()
    };
    EmbeddedCluster::start(t, SoftConfig::default(), node, as_tenant(TENANT_A), 3).unwrap()
}

/// Containers of `tenant` on the cluster's client devices.
fn runtime(c: &EmbeddedCluster, containers: usize, tenant: TenantSecret) -> Runtime {
    let devs = c.client_ctxs.clone();
    let addr = c.node.address().clone();
    Runtime::start(
        containers,
        vec![analysis::chain::<Mem>()],
        LEASE,
        move |i| {
            Client::connect(&devs[i % devs.len()], &addr, as_tenant(tenant))
                .map(PatronusMemory::new)
                .map_err(|e| FaasError::Stopped(e.to_string()))
        },
    )
}

fn wait(rt: &Runtime) -> Done {
    rt.next_done(Duration::from_secs(30))
        .expect("an invocation did not finish in 30 s")
}

fn chains_analyse_the_table(t: Link) {
    let mut c = cluster(t);
    let mut setup = PatronusMemory::new(c.clients.remove(0));
    let loaded = analysis::employees(analysis::DEFAULT_RECORDS, 1, 7);
    let table = analysis::create_table(&mut setup, 1024, &loaded).unwrap();
    let before = live_permissions(&c);
    let mut rt = runtime(&c, 2, TENANT_A);
    let added = analysis::employees(16, 10_000, 99);
    for e in &added {
        rt.submit("analysis", e.invocation(table)).unwrap();
    }
    let mut outputs = Vec::new();
    for _ in 0..added.len() {
        let done = wait(&rt);
        let report = done.report.unwrap();
        let names: Vec<_> = report.functions.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["check", "allocate", "write", "analyse", "respond"]);
        assert_eq!(
            (report.acquires, report.allocates, report.releases),
            (1, 1, 2),
            "one acquire on bootstrap, one output, a revoke of each: {report:?}"
        );
        let a = Analysis::decode(&report.result).unwrap();
        assert!(
            (513..=528).contains(&a.records()),
            "the loaded records and its own, at least: {a:?}"
        );
        assert_eq!(report.outputs.len(), 1);
        outputs.push((report.outputs[0], report.result));
    }
    // One more: it sees every record.
    let last = Employee {
        id: 99_999,
        department: 3,
        salary: 50_000,
    };
    rt.submit("analysis", last.invocation(table)).unwrap();
    let report = wait(&rt).report.unwrap();
    let all: Vec<Employee> = loaded
        .iter()
        .chain(&added)
        .chain([&last])
        .copied()
        .collect();
    assert_eq!(
        Analysis::decode(&report.result).unwrap(),
        Analysis::of(&all)
    );
    drop(rt.shutdown());
    // The outputs are there for their consumer (another client, acquiring them).
    for (datum, result) in outputs {
        let r = setup
            .acquire(datum.addr, datum.len, LEASE, Access::Read, Mode::Shared)
            .unwrap();
        assert_eq!(setup.read(&r, 0, result.len() as u32).unwrap(), result);
        setup.release(r).unwrap();
    }
    assert_eq!(
        live_permissions(&c),
        before,
        "every permission the chains took is gone"
    );
}

fn another_tenant_cannot_reach_the_table(t: Link) {
    let mut c = cluster(t);
    let mut setup = PatronusMemory::new(c.clients.remove(0));
    let table = analysis::create_table(&mut setup, 64, &analysis::employees(8, 1, 3)).unwrap();
    let mut rt = runtime(&c, 1, TENANT_B);
    let e = Employee {
        id: 5,
        department: 1,
        salary: 1_000,
    };
    let objects = live_objects(&c);
    rt.submit("analysis", e.invocation(table)).unwrap();
    let err = wait(&rt).report.unwrap_err();
    assert_eq!(
        live_objects(&c),
        objects,
        "the output reserved on bootstrap was freed when the chain failed"
    );
    assert!(
        matches!(
            err,
            FaasError::Memory(MemError::NotFound | MemError::Rejected)
        ),
        "tenant B's container is refused tenant A's table: {err:?}"
    );
    // Nothing changed: the table still has its 8 records.
    let mut rt = runtime(&c, 1, TENANT_A);
    rt.submit("analysis", e.invocation(table)).unwrap();
    let a = Analysis::decode(&wait(&rt).report.unwrap().result).unwrap();
    assert_eq!(a.records(), 9);
}

/// A container holding another's rkey (a function that learned it somehow) gets nothing
/// through it: the NIC refuses the access (the window is another client's), and the owner's
/// right works on.
fn another_container_s_rkey_is_refused_by_the_nic(t: Link) {
    let mut c = cluster(t);
    let mut a = PatronusMemory::new(c.clients.remove(0));
    let table = analysis::create_table(&mut a, 64, &analysis::employees(8, 1, 3)).unwrap();
    let ra = a
        .acquire(
            table.addr,
            table.len,
            LEASE,
            Access::ReadWrite,
            Mode::Shared,
        )
        .unwrap();
    let mut b: Mem = PatronusMemory::new(
        Client::connect(&c.client_ctxs[1], c.node.address(), as_tenant(TENANT_B)).unwrap(),
    );
    let own = b
        .allocate(&[64], LEASE, Mode::Shared)
        .unwrap()
        .pop()
        .unwrap();
    // B's own identity, A's address and rkey.
    let stolen = own.forged(table.addr, table.len, ra.rkey()).unwrap();
    assert_eq!(b.read(&stolen, 0, 64), Err(MemError::Rejected));
    assert_eq!(b.write(&stolen, 0, &[0xee; 8]), Err(MemError::Rejected));
    let header = a.read(&ra, 0, 8).unwrap();
    assert_eq!(
        header,
        8u64.to_le_bytes(),
        "the table is untouched and A reads on"
    );
    a.release(ra).unwrap();
    b.free(own).unwrap();
}

fn bad_input_is_refused_and_changes_nothing(t: Link) {
    let mut c = cluster(t);
    let mut setup = PatronusMemory::new(c.clients.remove(0));
    let table = analysis::create_table(&mut setup, 64, &analysis::employees(8, 1, 3)).unwrap();
    let mut rt = runtime(&c, 1, TENANT_A);
    let bad = [
        Employee {
            id: 1,
            department: 99,
            salary: 10,
        },
        Employee {
            id: 2,
            department: 1,
            salary: 0,
        },
    ];
    let objects = live_objects(&c);
    for e in bad {
        rt.submit("analysis", e.invocation(table)).unwrap();
        let err = wait(&rt).report.unwrap_err();
        assert!(matches!(err, FaasError::BadInput(_)), "{err:?}");
    }
    assert_eq!(
        live_objects(&c),
        objects,
        "a failed chain leaves no object behind (its reserved output is freed)"
    );
    // Not an employee table: refused by the check.
    let other = {
        let mut objs = setup.allocate(&[4096], LEASE, Mode::Shared).unwrap();
        let r = objs.pop().unwrap();
        let d = Datum {
            addr: r.addr(),
            len: r.len(),
        };
        setup.release(r).unwrap();
        d
    };
    let e = Employee {
        id: 3,
        department: 1,
        salary: 10,
    };
    rt.submit("analysis", e.invocation(other)).unwrap();
    assert!(matches!(wait(&rt).report, Err(FaasError::BadInput(_))));
    assert!(matches!(
        rt.submit("nothing", e.invocation(table)),
        Err(FaasError::NoChain(_))
    ));
    rt.submit("analysis", e.invocation(table)).unwrap();
    let a = Analysis::decode(&wait(&rt).report.unwrap().result).unwrap();
    assert_eq!(a.records(), 9, "only the good invocation added a record");
}

patronus_core::both_transports!(
    chains_analyse_the_table,
    another_tenant_cannot_reach_the_table,
    another_container_s_rkey_is_refused_by_the_nic,
    bad_input_is_refused_and_changes_nothing
);

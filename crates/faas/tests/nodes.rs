//! The data-analysis chain over several memory nodes (`PatronusMemory::over`), on both transports:
//! the same chain code, the employee table on one node and the chains' outputs going round
//! the nodes; every analysis is right, each chain made one acquire, one allocate and two
//! releases, its output is readable by another compute node, and no chain's permission is
//! left on any node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{EmbeddedNodes, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::nodes::{NodeId, NodeSet, NodeSetConfig};
use patronus_core::proto::messages::{Access, Mode};
use patronus_faas::apps::analysis::{self, Analysis, Employee};
use patronus_faas::{FaasError, Runtime};
use patronus_ods::{PatronusMemory, RemoteMemory};
use rnic::soft::{SoftConfig, SoftProvider};
use std::collections::BTreeSet;
use std::time::Duration;

type Mem = PatronusMemory<SoftProvider>;

const LEASE: Duration = Duration::from_secs(2);
const NODES: usize = 3;

fn permissions(n: &EmbeddedNodes) -> Vec<usize> {
    (0..NODES as u16)
        .map(|i| {
            n.node(NodeId(i))
                .unwrap()
                .fresh_stats()
                .occupancy
                .map_or(0, |o| o.permissions)
        })
        .collect()
}

fn analysis_chains_run_over_several_nodes(t: Link) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        pool_bytes: 16 << 20,
        ..NodeConfig::default()
    };
    let mut n = EmbeddedNodes::start(t, SoftConfig::default(), node, NODES).unwrap();
    let cfg = ClientConfig::default();
    let mut setup = PatronusMemory::over(n.connect(&cfg, NodeSetConfig::default()).unwrap());
    let loaded = analysis::employees(analysis::DEFAULT_RECORDS, 1, 7);
    let table = analysis::create_table(&mut setup, 1024, &loaded).unwrap();
    let before = permissions(&n);

    // Two containers, each a compute node with a set over every memory node.
    let devices = [n.open_device().unwrap(), n.open_device().unwrap()];
    let addresses = n.addresses().to_vec();
    let mut rt = Runtime::start(2, vec![analysis::chain::<Mem>()], LEASE, move |i| {
        let ctx = &devices[i % devices.len()];
        NodeSet::connect_with(addresses.len(), NodeSetConfig::default(), |node| {
            Client::connect(ctx, &addresses[node.index()], ClientConfig::default())
        })
        .map(PatronusMemory::over)
        .map_err(|e| FaasError::Stopped(e.to_string()))
    });
    let added = analysis::employees(12, 10_000, 99);
    for e in &added {
        rt.submit("analysis", e.invocation(table)).unwrap();
    }
    let mut outputs = Vec::new();
    for _ in 0..added.len() {
        let done = rt
            .next_done(Duration::from_secs(30))
            .expect("an invocation did not finish in 30 s");
        let report = done.report.unwrap();
        assert_eq!(
            (report.acquires, report.allocates, report.releases),
            (1, 1, 2),
            "{report:?}"
        );
        let a = Analysis::decode(&report.result).unwrap();
        assert!((513..=524).contains(&a.records()), "{a:?}");
        outputs.push((report.outputs[0], report.result));
    }
    let last = Employee {
        id: 99_999,
        department: 3,
        salary: 50_000,
    };
    rt.submit("analysis", last.invocation(table)).unwrap();
    let report = rt
        .next_done(Duration::from_secs(30))
        .expect("the last invocation did not finish in 30 s")
        .report
        .unwrap();
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

    // The outputs went round the nodes, and another compute node reads each.
    let on: BTreeSet<u16> = outputs
        .iter()
        .map(|(d, _)| setup.set().locate(d.addr).unwrap().0.0)
        .collect();
    assert!(on.len() >= 2, "outputs on nodes {on:?}");
    for (datum, result) in outputs {
        let r = setup
            .acquire(datum.addr, datum.len, LEASE, Access::Read, Mode::Shared)
            .unwrap();
        assert_eq!(setup.read(&r, 0, result.len() as u32).unwrap(), result);
        setup.release(r).unwrap();
    }
    assert_eq!(permissions(&n), before, "every chain's permission is gone");
}

patronus_core::both_transports!(analysis_chains_run_over_several_nodes);

//! RACE hashing on each baseline's remote memory: a loaded table keeps every key through
//! updates and lookups from one client (the workload of Figure 9, in small).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_bench::baseline::{BaselineClientConfig, BaselineConfig, BaselineMemory, Scheme};
use patronus_bench::kv::{KvWorkload, check_value};
use patronus_core::cluster::Transport;
use patronus_ods::race::{self, ClientOptions, RaceConfig};
use rnic::soft::SoftProvider;
use support::bed;

fn updates_and_lookups_keep_every_key(t: Transport, scheme: Scheme) {
    let b = bed(
        t,
        BaselineConfig {
            pool_bytes: 64 << 20,
            whole_pool_region: scheme != Scheme::Mr,
            ..BaselineConfig::default()
        },
    );
    let mut mem = BaselineMemory::<SoftProvider>::connect(
        &b.dev,
        b.node.address(),
        scheme,
        BaselineClientConfig::default(),
    )
    .unwrap();
    let keys = 100u64;
    let value = |i: u64, v: u64| patronus_bench::kv::value(i, v, 4096);
    let root = race::create(
        &mut mem,
        RaceConfig {
            initial_depth: 1,
            block_size: 4224,
            ..RaceConfig::default()
        },
    )
    .unwrap();
    let mut t = race::open(&mut mem, root, ClientOptions::default()).unwrap();
    for i in 0..keys {
        t.insert(&mut mem, &KvWorkload::key(i), &value(i, 0))
            .unwrap();
    }
    for round in 1..=5u64 {
        for i in 0..keys {
            t.update(&mut mem, &KvWorkload::key(i), &value(i, round))
                .unwrap_or_else(|e| panic!("round {round}, update of key {i}: {e}"));
            let got = t.get(&mut mem, &KvWorkload::key(i)).unwrap().unwrap();
            assert_eq!(check_value(i, &got), Some(round), "key {i}");
        }
    }
}

mod inproc {
    use super::*;
    #[test]
    fn unprot() {
        updates_and_lookups_keep_every_key(Transport::InProc, Scheme::Unprot)
    }
    #[test]
    fn mr() {
        updates_and_lookups_keep_every_key(Transport::InProc, Scheme::Mr)
    }
    #[test]
    fn rpc() {
        updates_and_lookups_keep_every_key(Transport::InProc, Scheme::Rpc)
    }
}

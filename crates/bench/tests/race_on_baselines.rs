//! RACE hashing on each baseline's remote memory: a loaded table keeps every key through
//! updates and lookups from one client (the workload of Figure 9, in small).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_bench::baseline::{BaselineClientConfig, BaselineConfig, BaselineMemory, Scheme};
use patronus_bench::kv::{KvWorkload, check_value};
use patronus_core::cluster::Link;
use patronus_ods::race::{self, ClientOptions, RaceConfig};
use rnic::soft::SoftProvider;
use support::bed;

fn updates_and_lookups_keep_every_key(t: Link, scheme: Scheme) {
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
        updates_and_lookups_keep_every_key(Link::InProc, Scheme::Unprot)
    }
    #[test]
    fn mr() {
        updates_and_lookups_keep_every_key(Link::InProc, Scheme::Mr)
    }
    #[test]
    fn rpc() {
        updates_and_lookups_keep_every_key(Link::InProc, Scheme::Rpc)
    }
}

/// Several clients' updates and lookups interleaved step by step (as the benchmark's driver
/// does), then every key read back.
fn interleaved_writers_keep_every_key(t: Link, scheme: Scheme) {
    let b = bed(
        t,
        BaselineConfig {
            pool_bytes: 64 << 20,
            whole_pool_region: scheme != Scheme::Mr,
            ..BaselineConfig::default()
        },
    );
    let connect = || {
        BaselineMemory::<SoftProvider>::connect(
            &b.dev,
            b.node.address(),
            scheme,
            BaselineClientConfig::default(),
        )
        .unwrap()
    };
    interleaved(connect, ClientOptions::default());
}

fn interleaved<M: patronus_ods::RemoteMemory>(connect: impl Fn() -> M, opts: ClientOptions) {
    use patronus_ods::race::{Lookup, Update};
    use std::task::Poll;
    let keys = 20u64;
    let value = |i: u64, v: u64| patronus_bench::kv::value(i, v, 64);
    let mut setup = connect();
    let root = race::create(&mut setup, RaceConfig::default()).unwrap();
    let mut t0 = race::open(&mut setup, root, opts).unwrap();
    for i in 0..keys {
        t0.insert(&mut setup, &KvWorkload::key(i), &value(i, 0))
            .unwrap();
    }
    let mut clients: Vec<_> = (0..4)
        .map(|_| {
            let mut m = connect();
            let t = race::open(&mut m, root, opts).unwrap();
            (m, t)
        })
        .collect();
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    for round in 1..=50u64 {
        let mut ops: Vec<_> = (0..clients.len())
            .map(|c| {
                let k = next() % keys;
                let (_, t) = &clients[c];
                (
                    k,
                    Box::new(
                        Update::new(t, &KvWorkload::key(k), &value(k, round * 10 + c as u64))
                            .unwrap(),
                    ),
                    None::<Lookup>,
                )
            })
            .collect();
        let mut done = vec![false; clients.len()];
        let mut steps = 0;
        while done.iter().any(|d| !d) {
            steps += 1;
            assert!(steps < 100_000, "stuck");
            let c = (next() as usize) % clients.len();
            if done[c] {
                continue;
            }
            let (m, t) = &mut clients[c];
            if let Poll::Ready(r) = ops[c].1.step(t, m) {
                r.unwrap_or_else(|e| panic!("round {round}, client {c}, key {}: {e}", ops[c].0));
                done[c] = true;
            } else if t.awaiting_answer() {
                // Waiting for an acquire's answer is not a step of progress: wait for it.
                m.wait(std::time::Duration::from_secs(1));
            }
        }
    }
    for i in 0..keys {
        let got = t0.get(&mut setup, &KvWorkload::key(i)).unwrap();
        assert!(got.is_some_and(|v| check_value(i, &v).is_some()), "key {i}");
    }
}

mod interleaved {
    use super::*;
    #[test]
    fn unprot() {
        interleaved_writers_keep_every_key(Link::InProc, Scheme::Unprot)
    }
    /// Found an update reporting its key absent (a reader's right over a freed block refused,
    /// the address reused for the same key: the slot word unchanged).
    #[test]
    fn mr() {
        interleaved_writers_keep_every_key(Link::InProc, Scheme::Mr)
    }
    #[test]
    fn rpc() {
        interleaved_writers_keep_every_key(Link::InProc, Scheme::Rpc)
    }
    #[test]
    fn patronus() {
        on_patronus(ClientOptions::default());
    }
    /// Rights that outlive a freed block's reuse (Figure 9's leases): a reader's kept right is
    /// refused while the slot names the same address again.
    #[test]
    fn patronus_with_long_leases() {
        on_patronus(patronus_bench::experiments::fig9::options());
    }
    fn on_patronus(opts: ClientOptions) {
        use patronus_core::cluster::EmbeddedCluster;
        let c = EmbeddedCluster::start(
            Link::InProc,
            rnic::soft::SoftConfig::default(),
            patronus_core::manager::NodeConfig::default(),
            patronus_core::client::ClientConfig::default(),
            0,
        )
        .unwrap();
        let dev = c.node_ctx.clone();
        interleaved(
            || {
                patronus_ods::PatronusMemory::new(
                    patronus_core::client::Client::<SoftProvider>::connect(
                        &dev,
                        c.node.address(),
                        Default::default(),
                    )
                    .unwrap(),
                )
            },
            opts,
        );
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
mod race_support;
mod support;
use patronus_core::cluster::Transport;
use patronus_ods::race::{self, Insert, LockMode};
use race_support::{bed, key, opts, small, value};

#[test]
fn debug() {
    let (_bed, mut mems) = bed(Transport::InProc, 1);
    let mem = &mut mems[0];
    let root = race::create(mem, small(LockMode::Lease)).unwrap();
    eprintln!("created");
    let mut c = race::open(mem, root, opts()).unwrap();
    eprintln!("opened {c:?}");
    for i in 0..200 {
        let mut op = Insert::new(&c, &key(i), &value(i, 0)).unwrap();
        for s in 0..400 {
            let st = op.stage();
            let r = op.step(&mut c, mem);
            eprintln!("key {i} step {s} {st:?} -> {r:?} split={:?}", op.split());
            if r.is_ready() { break; }
        }
    }
}

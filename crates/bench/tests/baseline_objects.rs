//! The baseline node's objects and the requests the data-structure interface needs: `Alloc`
//! (zeroed, size classes, a clear `Exhausted`), `Free` (under Mr, every region over the
//! object goes with it), bad input answered with a `FailCode`, page-sized `Read`/`Write` and
//! `Cas`/`Faa` RPCs, and the named roots — on both transports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_bench::baseline::node::MIN_BLOCK;
use patronus_bench::baseline::proto::MAX_PAYLOAD;
use patronus_bench::baseline::{
    BaselineClient, BaselineConfig, BaselineError, BaselineReply, BaselineRequest, FailCode, Scheme,
};
use patronus_core::cluster::Link;
use patronus_core::proto::messages::RootName;
use rnic::soft::SoftProvider;
use support::{bed, is_rejected, small};

type Client = BaselineClient<SoftProvider>;

fn failed<T: std::fmt::Debug>(r: Result<T, BaselineError>) -> FailCode {
    match r {
        Err(BaselineError::Failed(code)) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn alloc_zeroes_reuses_and_reports_exhaustion(t: Link) {
    let cfg = BaselineConfig {
        pool_bytes: 64 << 10,
        ..small(false)
    };
    let bed = bed(t, cfg);
    let mut c = Client::connect(&bed.dev, bed.node.address(), Scheme::Unprot).unwrap();
    let (a, rkey) = c.alloc(100).unwrap();
    assert_eq!(
        rkey,
        c.rkey(),
        "an Unprot object is reached with the pool's rkey"
    );
    let rkey = rkey.unwrap();
    assert_eq!((a - c.pool_addr()) % MIN_BLOCK, 0);
    c.write(rkey, a, &[0xab; 100]).unwrap();
    c.free(a).unwrap();
    let (b, _) = c.alloc(128).unwrap();
    assert_eq!(b, a, "the class's freed block is reused");
    let mut back = [1u8; 128];
    c.read(rkey, b, &mut back).unwrap();
    assert_eq!(back, [0; 128], "zeroed before it is handed out");
    assert_eq!(failed(c.alloc(0)), FailCode::Invalid);
    assert_eq!(
        failed(c.alloc(1 << 20)),
        FailCode::Exhausted,
        "more than the pool"
    );
    // 16 KiB blocks behind the first 128 bytes: three fit, the fourth does not.
    let mut big = Vec::new();
    loop {
        match c.alloc(16 << 10) {
            Ok((x, _)) => big.push(x),
            Err(e) => {
                assert_eq!(failed::<()>(Err(e)), FailCode::Exhausted);
                break;
            }
        }
    }
    assert_eq!(big.len(), 3);
    c.free(big[1]).unwrap();
    assert_eq!(c.alloc(10_000).unwrap().0, big[1], "room again once freed");
    let s = bed.node.stats();
    assert_eq!((s.objects_allocated, s.objects_freed), (6, 2));
}

fn bad_frees_are_refused_and_change_nothing(t: Link) {
    let bed = bed(t, small(false));
    let mut c = Client::connect(&bed.dev, bed.node.address(), Scheme::Rpc).unwrap();
    let (a, rkey) = c.alloc(256).unwrap();
    assert_eq!(rkey, None, "an Rpc client gets no key");
    let end = c.pool_addr() + c.pool_len();
    for bad in [a + 8, a + 256, end - 64, end, 0, u64::MAX] {
        assert_eq!(failed(c.free(bad)), FailCode::UnknownObject, "{bad:#x}");
    }
    c.rpc_write(a, b"kept").unwrap();
    c.free(a).unwrap();
    assert_eq!(failed(c.free(a)), FailCode::UnknownObject, "double free");
    assert_eq!(c.alloc(200).unwrap().0, a, "the block went back once");
    assert_eq!(bed.node.stats().objects_freed, 1);
}

fn mr_alloc_registers_and_free_revokes_every_region(t: Link) {
    let bed = bed(t, small(true));
    let (dev, at) = (&bed.dev, bed.node.address());
    let mut a = Client::connect(dev, at, Scheme::Mr).unwrap();
    let mut b = Client::connect(dev, at, Scheme::Mr).unwrap();
    let (addr, k1) = a.alloc(4096).unwrap();
    let k1 = k1.expect("an Mr object comes with its region");
    a.write(k1, addr + 64, b"object!!").unwrap();
    // Another client registers over parts of it, read-write and read-only.
    let k2 = b.register_object(addr + 64, 64, false).unwrap();
    let k3 = b.register_object(addr, 4096, true).unwrap();
    let mut got = [0u8; 8];
    b.read(k2, addr + 64, &mut got).unwrap();
    assert_eq!(&got, b"object!!");
    b.read(k3, addr + 64, &mut got).unwrap();
    // An object's range must stay inside a live object; a raw range may be anywhere.
    let leaves = b.register_object(addr + 4000, 200, false);
    assert_eq!(failed(leaves), FailCode::UnknownObject);
    let nothing = b.register_object(addr + 8192, 8, false);
    assert_eq!(failed(nothing), FailCode::UnknownObject);
    let raw = b.register_mr(addr + 8192, 64).unwrap();
    b.deregister_mr(raw).unwrap();

    let before = bed.node.stats();
    a.free(addr).unwrap();
    let after = bed.node.stats();
    assert_eq!(
        after.mrs_deregistered - before.mrs_deregistered,
        3,
        "k1, k2 and k3 go with the object"
    );
    let gone = a.deregister_mr(k1);
    assert_eq!(failed(gone), FailCode::UnknownRkey);
    assert!(is_rejected(&b.read(k2, addr + 64, &mut got)), "stale rkey");
    assert!(is_rejected(&a.read(k1, addr + 64, &mut got)), "stale rkey");
    let mut c = Client::connect(dev, at, Scheme::Mr).unwrap();
    assert_eq!(failed(c.free(addr)), FailCode::UnknownObject, "double free");
    assert_eq!(
        failed(c.register_object(addr, 64, false)),
        FailCode::UnknownObject
    );
    // A read-only region refuses a WRITE.
    let (x, _) = c.alloc(64).unwrap();
    let ro = c.register_object(x, 64, true).unwrap();
    assert!(is_rejected(&c.write(ro, x, b"nope")));
}

fn rpc_moves_pages_and_runs_atomics(t: Link) {
    let bed = bed(t, small(false));
    let mut c = Client::connect(&bed.dev, bed.node.address(), Scheme::Rpc).unwrap();
    let (a, _) = c.alloc(8192).unwrap();
    let page: Vec<u8> = (0..MAX_PAYLOAD).map(|i| (i * 13) as u8).collect();
    let requests = bed.node.stats().requests;
    let write = BaselineRequest::Write {
        addr: a,
        bytes: page.clone(),
    };
    assert_eq!(c.call(write).unwrap(), BaselineReply::Done);
    let read = BaselineRequest::Read {
        addr: a,
        len: MAX_PAYLOAD as u32,
    };
    assert_eq!(c.call(read).unwrap(), BaselineReply::Data(page.clone()));
    assert_eq!(
        bed.node.stats().requests - requests,
        2,
        "a page per request"
    );
    let mut two = vec![0u8; 5000];
    c.rpc_read(a, &mut two).unwrap();
    assert_eq!(&two[..MAX_PAYLOAD], &page[..]);
    let too_long = BaselineRequest::Read {
        addr: a,
        len: MAX_PAYLOAD as u32 + 1,
    };
    assert_eq!(
        c.call(too_long).unwrap(),
        BaselineReply::Failed(FailCode::TooLong)
    );
    let oversized = BaselineRequest::Write {
        addr: a,
        bytes: vec![0; MAX_PAYLOAD + 1],
    };
    assert!(matches!(
        c.call(oversized),
        Err(BaselineError::InvalidUse(_))
    ));
    // Atomics on a word of the second page (zeroed, never written).
    let w = a + 4096;
    assert_eq!(c.rpc_cas(w, 0, 7).unwrap(), 0);
    assert_eq!(c.rpc_cas(w, 0, 9).unwrap(), 7, "compare failed: unchanged");
    assert_eq!(c.rpc_faa(w, 5).unwrap(), 7);
    let mut word = [0u8; 8];
    c.rpc_read(w, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 12);
    assert_eq!(failed(c.rpc_faa(w + 4, 1)), FailCode::Misaligned);
    let end = c.pool_addr() + c.pool_len();
    assert_eq!(failed(c.rpc_cas(end, 0, 1)), FailCode::OutOfRange);
    assert_eq!(failed(c.rpc_faa(end - 4, 1)), FailCode::Misaligned);
    let mut u = Client::connect(&bed.dev, bed.node.address(), Scheme::Unprot).unwrap();
    assert_eq!(failed(u.rpc_faa(w, 1)), FailCode::WrongScheme);
    let s = bed.node.stats();
    assert_eq!(s.rpc_atomics, 3);
}

fn names_are_shared_by_every_client(t: Link) {
    let bed = bed(t, small(false));
    let mut a = Client::connect(&bed.dev, bed.node.address(), Scheme::Unprot).unwrap();
    let mut b = Client::connect(&bed.dev, bed.node.address(), Scheme::Rpc).unwrap();
    let root = RootName::new("table/root").unwrap();
    let (x, _) = a.alloc(64).unwrap();
    a.publish(root, x, 64).unwrap();
    assert_eq!(failed(b.publish(root, x, 8)), FailCode::NameTaken);
    assert_eq!(b.lookup(root).unwrap(), (x, 64));
    assert_eq!(
        failed(b.publish(RootName::new("e").unwrap(), x, 0)),
        FailCode::Invalid
    );
    b.unpublish(root).unwrap();
    assert_eq!(failed(a.lookup(root)), FailCode::UnknownName);
    assert_eq!(failed(a.unpublish(root)), FailCode::UnknownName);
}

patronus_core::both_transports!(
    alloc_zeroes_reuses_and_reports_exhaustion,
    bad_frees_are_refused_and_change_nothing,
    mr_alloc_registers_and_free_revokes_every_region,
    rpc_moves_pages_and_runs_atomics,
    names_are_shared_by_every_client,
);

//! The image chain on warm containers, on both transports: a real photograph (public domain,
//! `testdata/SOURCE.md`) in remote memory becomes a thumbnail that decodes to the expected
//! size; each chain made one acquire, one allocate and two releases and holds nothing after;
//! what is no image, or a thumbnail of size 0, is refused with a clear error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::live_permissions;

use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_faas::apps::image::{self, Thumbnailed};
use patronus_faas::{FaasError, Runtime};
use patronus_ods::PatronusMemory;
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::Duration;

type Mem = PatronusMemory<SoftProvider>;

const ROCKET: &[u8] = include_bytes!("../testdata/rocket.jpg");

fn setup(t: Link) -> (EmbeddedCluster, Mem, Runtime) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..NodeConfig::default()
    };
    let mut c =
        EmbeddedCluster::start(t, SoftConfig::default(), node, ClientConfig::default(), 2).unwrap();
    let mem = PatronusMemory::new(c.clients.remove(0));
    let devs = c.client_ctxs.clone();
    let addr = c.node.address().clone();
    let rt = Runtime::start(
        2,
        vec![image::chain::<Mem>()],
        Duration::from_secs(5),
        move |i| {
            Client::connect(&devs[i % devs.len()], &addr, ClientConfig::default())
                .map(PatronusMemory::new)
                .map_err(|e| FaasError::Stopped(e.to_string()))
        },
    );
    (c, mem, rt)
}

fn a_photograph_becomes_a_thumbnail(t: Link) {
    let (c, mut mem, mut rt) = setup(t);
    let photo = image::upload(&mut mem, ROCKET).unwrap();
    let before = live_permissions(&c);
    for side in [128, 64] {
        rt.submit("image", image::invocation(photo, side)).unwrap();
    }
    let mut thumbs = Vec::new();
    for _ in 0..2 {
        let done = rt
            .next_done(Duration::from_secs(60))
            .expect("no result in 60 s");
        let report = done.report.unwrap();
        let names: Vec<_> = report.functions.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["extract", "transform", "handler", "thumbnail", "store"]
        );
        assert_eq!(
            (report.acquires, report.allocates, report.releases),
            (1, 1, 2)
        );
        thumbs.push(Thumbnailed::decode(&report.result).unwrap());
    }
    drop(rt.shutdown());
    thumbs.sort_by_key(|t| t.thumbnail_size);
    let sizes: Vec<_> = thumbs.iter().map(|t| (t.size, t.thumbnail_size)).collect();
    assert_eq!(sizes, [((640, 427), (64, 43)), ((640, 427), (128, 85))]);
    for t in thumbs {
        let png = image::fetch(&mut mem, t.thumbnail).unwrap();
        let decoded = ::image::load_from_memory(&png).unwrap();
        assert_eq!(
            (decoded.width(), decoded.height()),
            t.thumbnail_size,
            "the thumbnail decodes to its size"
        );
    }
    assert_eq!(
        live_permissions(&c),
        before,
        "no permission of the chains is left"
    );
}

fn what_is_no_image_is_refused(t: Link) {
    let (_c, mut mem, mut rt) = setup(t);
    let text = image::upload(&mut mem, b"this is not an image at all").unwrap();
    rt.submit("image", image::invocation(text, 128)).unwrap();
    let err = rt
        .next_done(Duration::from_secs(60))
        .unwrap()
        .report
        .unwrap_err();
    assert!(
        matches!(&err, FaasError::BadInput(m) if m.contains("image")),
        "{err:?}"
    );
    let photo = image::upload(&mut mem, ROCKET).unwrap();
    rt.submit("image", image::invocation(photo, 0)).unwrap();
    let err = rt
        .next_done(Duration::from_secs(60))
        .unwrap()
        .report
        .unwrap_err();
    assert!(
        matches!(&err, FaasError::BadInput(m) if m.contains("size 0")),
        "{err:?}"
    );
}

patronus_core::both_transports!(
    a_photograph_becomes_a_thumbnail,
    what_is_no_image_is_refused
);

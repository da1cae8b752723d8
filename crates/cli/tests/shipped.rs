//! The shipped binary carries no test helpers: `patronus-cli` depends neither on the
//! evaluation crate nor on `patronus-core`'s `testing` feature (forged permissions, raw
//! control access), as cargo resolves it for a build of this package alone
//! (`cargo install`, `cargo build -p patronus-cli`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_shipped_binary_links_no_test_helpers() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "patronus-cli",
            "-e",
            "normal,build,features",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.contains("patronus-core"), "{tree}");
    assert!(
        !tree.contains("patronus-bench"),
        "links the bench crate:\n{tree}"
    );
    assert!(
        !tree.contains("feature \"testing\""),
        "compiles a testing feature:\n{tree}"
    );
}

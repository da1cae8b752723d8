//! `patronus faas` as a process: a thumbnail of a real photograph written to a file that
//! decodes to the expected size; a file that is no image, or is missing, a clear error and a
//! failing exit code; the analysis printed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_patronus");
const ROCKET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../faas/testdata/rocket.jpg");

fn faas(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(EXE)
        .arg("faas")
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("patronus-faas-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn image_writes_a_real_thumbnail() {
    let out = scratch("thumb.jpg");
    let (ok, stdout, stderr) = faas(&[
        "image",
        "--input",
        ROCKET,
        "--out",
        out.to_str().unwrap(),
        "--side",
        "100",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("thumbnail") && stdout.contains("1 acquire"),
        "{stdout}"
    );
    let thumb = image::open(&out).unwrap();
    assert_eq!((thumb.width(), thumb.height()), (100, 67));
}

#[test]
fn bad_input_is_a_clear_error() {
    let text = scratch("not-an-image.jpg");
    std::fs::write(&text, b"hello").unwrap();
    let out = scratch("never.png");
    let (ok, _, stderr) = faas(&[
        "image",
        "--input",
        text.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("not an image"), "{stderr}");
    assert!(!out.exists(), "nothing written");
    let (ok, _, stderr) = faas(&[
        "image",
        "--input",
        "/nonexistent/photo.jpg",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("reading /nonexistent/photo.jpg"),
        "{stderr}"
    );
}

#[test]
fn analyse_prints_the_analysis() {
    let (ok, stdout, stderr) = faas(&["analyse", "--records", "100", "--department", "2"]);
    assert!(ok, "{stdout}\n{stderr}");
    let all = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .unwrap();
    assert!(all.ends_with("101"), "100 loaded and one added: {stdout}");
}

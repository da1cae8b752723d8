//! What a new user meets first, as processes: `serve --admin ""` serves no admin endpoint; a
//! port in use is an error naming the address, its cause said once; `status` pointed at the
//! port clients use says so instead of printing bytes; `faas --connect` works against a node
//! with the default lease limit; probing leaves nothing allocated; the demo runs to its end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use support::{EXE, Served};

fn patronus(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_empty_admin_address_serves_no_admin_endpoint() {
    let mut child = Command::new(EXE)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin", ""])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("listening 127.0.0.1:"), "{line}");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let rest: Vec<String> = out.lines().map(|l| l.unwrap()).collect();
    assert!(child.wait().unwrap().success(), "{rest:?}");
    assert!(
        !rest.iter().any(|l| l.starts_with("admin")),
        "no admin endpoint with --admin \"\": {rest:?}"
    );
}

#[test]
fn a_port_in_use_is_one_line_naming_the_address() {
    let node = Served::start(&[]);
    let listen = node.listen.to_string();
    let second = patronus(&["serve", "--listen", &listen, "--admin", ""]);
    assert!(!second.status.success());
    let err = stderr(&second);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&format!("listening for clients on {listen}")),
        "{err}"
    );
    let cause = std::io::Error::from(std::io::ErrorKind::AddrInUse).to_string();
    assert!(
        lines[0].contains("in use"),
        "the cause is named ({cause}): {err}"
    );
    assert_eq!(lines[0].matches("(os error").count(), 1, "said once: {err}");

    // The admin port in use: named too.
    let admin = node.admin.to_string();
    let third = patronus(&["serve", "--listen", "127.0.0.1:0", "--admin", &admin]);
    assert!(!third.status.success());
    assert!(stderr(&third).contains(&admin), "{}", stderr(&third));
    node.terminate();
}

#[test]
fn status_at_the_client_port_says_it_is_not_the_admin_endpoint() {
    let node = Served::start(&[]);
    let out = patronus(&["status", &node.listen.to_string()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("did not answer in HTTP") && err.contains(&node.listen.to_string()),
        "{err}"
    );
    assert!(
        !err.contains("[0,") && !err.contains("[0, "),
        "no raw bytes: {err}"
    );
    node.terminate();
}

#[test]
fn faas_chains_and_probes_against_a_default_node_leave_nothing() {
    // The node's default maximum lease (1 s) is below what `faas` asks for (5 s): the client
    // learns the limit when it connects and plans within it.
    let node = Served::start(&[]);
    let addr = node.listen.to_string();
    let dir = std::env::temp_dir().join(format!("patronus-front-door-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let thumb = dir.join("thumb.png");
    let rocket = concat!(env!("CARGO_MANIFEST_DIR"), "/../faas/testdata/rocket.jpg");
    for _ in 0..3 {
        let image = patronus(&[
            "faas",
            "--connect",
            &addr,
            "image",
            "--input",
            rocket,
            "--out",
            thumb.to_str().unwrap(),
        ]);
        assert!(image.status.success(), "{}", stderr(&image));
        let analyse = patronus(&["faas", "--connect", &addr, "analyse"]);
        assert!(analyse.status.success(), "{}", stderr(&analyse));
        let probe = patronus(&["probe", "--connect", &addr]);
        assert!(probe.status.success(), "{}", stderr(&probe));
    }
    let status = patronus(&["status", &node.admin.to_string(), "--json"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(report["node"]["live_objects"], 0, "{report}");
    assert_eq!(report["node"]["pool_bytes_in_use"], 0, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
    node.terminate();
}

#[test]
fn a_table_larger_than_the_largest_object_says_so() {
    let out = patronus(&["faas", "analyse", "--records", "40000"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("40001 records")
            && err.contains("larger than the largest object the memory node allocates"),
        "{err}"
    );
    assert_eq!(
        err.matches("invalid argument").count(),
        1,
        "said once: {err}"
    );
}

#[test]
fn the_demo_runs_to_its_end_on_both_transports() {
    for transport in ["inproc", "tcp"] {
        let out = patronus(&["demo", "--transport", transport]);
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{transport}: {printed}\n{}",
            stderr(&out)
        );
        for step in [
            "[4] alice tries to extend again: refused",
            "refused by the memory node",
            "[5] alice revokes: bob's waiting acquire is granted",
            "[6] carol acquires",
            "Memory node report",
        ] {
            assert!(
                printed.contains(step),
                "{transport}: no {step:?}:\n{printed}"
            );
        }
    }
}

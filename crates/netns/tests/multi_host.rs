//! Multi-host tests: a memory node and clients as separate processes on separate hosts —
//! network namespaces joined by veth pairs through a bridge — talking over the soft RNIC's
//! TCP transport. See `docs/multi-host-tests.md` for the topology and what each test checks.
//!
//! They need root and iproute2; without them (or on a kernel that refuses namespaces), each
//! test prints `SKIPPED: <reason>` to stderr and returns. Every wait is bounded; every
//! namespace and process a test made is removed when it ends, also on failure.

mod support;

use std::time::Duration;
use support::process::{Proc, field, number, run};
use support::topology::Topology;
use support::{log, now, run_or_skip};

const PORT: u16 = 7000;
/// Long enough for a process to start and connect on a loaded 2-core machine.
const START: Duration = Duration::from_secs(30);
/// Bound on one short client process.
const SHORT: Duration = Duration::from_secs(60);

/// Starts a memory node on `host`; returns it with its address.
fn start_node(t: &Topology, host: &str, max_lifetime_ms: u64) -> (Proc, String) {
    let h = t.host(host);
    let listen = format!("{}:{PORT}", h.addr);
    let mut node = Proc::spawn(
        h,
        "memory-node",
        &[
            "serve",
            "--listen",
            &listen,
            "--max-lifetime-ms",
            &max_lifetime_ms.to_string(),
            "--exit-on-stdin-eof",
        ],
    );
    let line = node.expect_line("listening ", START);
    assert_eq!(line, format!("listening {listen}"));
    (node, listen)
}

/// Stops a memory node with SIGTERM; it must exit cleanly and report what it served.
fn stop_node(mut node: Proc) -> String {
    let (status, lines) = node.terminate(SHORT);
    assert!(status.success(), "[{}] {status}: {lines:?}", node.tag);
    let last = lines
        .iter()
        .find(|l| l.starts_with("stopped by SIGTERM"))
        .unwrap_or_else(|| panic!("no `stopped by SIGTERM` line: {lines:?}"));
    last.clone()
}

fn line_with<'l>(lines: &'l [String], prefix: &str) -> &'l str {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in {lines:?}"))
}

/// (a) Data and permissions across hosts: B allocates, writes and publishes; C, another
/// host, finds it by name, reads it with a read-only permission, and the NIC refuses C's
/// write through that permission.
#[test]
fn objects_cross_hosts_with_their_permissions() {
    run_or_skip("objects_cross_hosts_with_their_permissions", || {
        let t = Topology::new("obj", 1, &["a", "b", "c"]);
        let (node, addr) = start_node(&t, "a", 2000);

        let text = "hello from host b";
        let (status, out) = run(
            t.host("b"),
            "put",
            &[
                "put",
                "--connect",
                &addr,
                "--name",
                "greeting",
                "--text",
                text,
            ],
            SHORT,
        );
        assert!(status.success(), "put: {status} {out:?}");
        let put = line_with(&out, "put ");

        let (status, out) = run(
            t.host("c"),
            "get",
            &["get", "--connect", &addr, "--name", "greeting"],
            SHORT,
        );
        assert!(status.success(), "get: {status} {out:?}");
        let got = line_with(&out, "got ");
        assert!(got.ends_with(&format!("text={text}")), "{got}");
        assert_eq!(field(got, "addr"), field(put, "addr"), "same object");
        let refused = line_with(&out, "write_through_read_permission=");
        assert!(
            refused.starts_with("write_through_read_permission=refused"),
            "{refused}"
        );
        assert_eq!(line_with(&out, "text_after="), format!("text_after={text}"));

        let served = stop_node(node);
        log(&format!(
            "[obj] PASSED: {} published by b ({}) read by c ({}); c's write through a read-only \
             permission refused; node: {served}",
            field(put, "addr").unwrap_or("?"),
            t.host("b").addr,
            t.host("c").addr,
        ));
    });
}

/// (b) A client killed in the middle of an exclusive lease blocks others only until its lease
/// ends. B holds the object exclusively (300 ms leases, extended while it lives); C is
/// refused while B is alive and holding; after SIGKILL, C's exclusive acquire succeeds.
/// Twice: once with B's link up (the kernel closes B's connections; the node ends its
/// session), once with B's link cut before the kill (a host that vanished: nothing reaches
/// the node, which the lease's end alone releases). The node's maximum lifetime (10 s) is
/// far above the bound on C's wait (8 s), so it is the lease, not the maximum lifetime,
/// that lets C in.
#[test]
fn killed_holder_blocks_only_until_its_lease_ends() {
    run_or_skip("killed_holder_blocks_only_until_its_lease_ends", || {
        let t = Topology::new("lease", 2, &["a", "b", "c"]);
        let (node, addr) = start_node(&t, "a", 10_000);
        let (status, out) = run(
            t.host("b"),
            "put",
            &[
                "put",
                "--connect",
                &addr,
                "--name",
                "lock",
                "--text",
                "lock",
            ],
            SHORT,
        );
        assert!(status.success(), "put: {status} {out:?}");

        let mut results = Vec::new();
        for (phase, cut_link_first) in [("process killed", false), ("host vanished", true)] {
            let mut holder = Proc::spawn(
                t.host("b"),
                "holder",
                &[
                    "hold",
                    "--connect",
                    &addr,
                    "--name",
                    "lock",
                    "--lease-ms",
                    "300",
                ],
            );
            holder.expect_line("holding ", START);
            // B keeps its lease: its first extension (a third of a lease later) succeeded.
            let extended = holder.expect_line("extend=", START);
            assert!(extended.starts_with("extend=ok"), "{phase}: {extended}");

            // While B lives and holds, C's exclusive acquire is refused.
            let (status, out) = run(
                t.host("c"),
                "try",
                &[
                    "exclusive",
                    "--connect",
                    &addr,
                    "--name",
                    "lock",
                    "--wait-ms",
                    "0",
                ],
                SHORT,
            );
            assert_eq!(
                status.code(),
                Some(3),
                "{phase}: C must be refused: {out:?}"
            );
            line_with(&out, "refused ");
            assert!(
                holder.running(),
                "{phase}: B must still be alive when C is refused"
            );
            holder.drain();

            if cut_link_first {
                t.link_down("b");
            }
            holder.kill();
            let killed = now();
            let (status, out) = run(
                t.host("c"),
                "after-kill",
                &[
                    "exclusive",
                    "--connect",
                    &addr,
                    "--name",
                    "lock",
                    "--wait-ms",
                    "1000",
                    "--deadline-ms",
                    "8000",
                ],
                SHORT,
            );
            let waited = now().saturating_duration_since(killed);
            assert!(
                status.success(),
                "{phase}: C's acquire after B's death must succeed within 8 s: {out:?}"
            );
            let got = line_with(&out, "acquired ");
            results.push(format!(
                "{phase}: C refused while B held; C acquired {} ms after the kill ({} attempts)",
                waited.as_millis(),
                number(got, "attempts")
            ));
            if cut_link_first {
                t.link_up("b");
            }
        }
        let served = stop_node(node);
        log(&format!(
            "[lease] PASSED: {}; node: {served}",
            results.join("; ")
        ));
    });
}

/// (c) A link that drops for a while is survived: B adds 1 to a counter in a loop while its
/// link goes down (at least 1.5 s, and until B has seen an error) and comes back. Each FAA
/// is acknowledged (S), reported outcome-unknown (U) or reported not run; the counter V must
/// satisfy S ≤ V ≤ S + U — nothing acknowledged lost, nothing applied twice — in B's reads
/// during the loop, in B's read after it and in C's read from another host. After the link
/// returns, B's FAAs and reads succeed again.
#[test]
fn link_flap_loses_and_doubles_nothing() {
    run_or_skip("link_flap_loses_and_doubles_nothing", || {
        let t = Topology::new("flap", 3, &["a", "b", "c"]);
        let (node, addr) = start_node(&t, "a", 30_000);
        let mut counter = Proc::spawn(
            t.host("b"),
            "faa-loop",
            &[
                "faa-loop",
                "--connect",
                &addr,
                "--name",
                "counter",
                "--lease-ms",
                "20000",
                "--deadline-ms",
                "90000",
            ],
        );
        counter.expect_line("ready ", START);
        let before = counter.expect_line("progress ", START);

        t.link_down("b");
        let down = now();
        // An FAA whose answer the outage swallowed is probed until the QP's budget runs out
        // (15 s by default: a merely slow peer must not kill a QP); B notices within that.
        let budget = rnic::soft::AdaptiveTimeouts::default().budget;
        let felt = counter.next_line(|l| l.starts_with("error "), budget + Duration::from_secs(5));
        // Keep the link down for at least 1.5 s, reading B's output meanwhile.
        let min_down = Duration::from_millis(1500);
        while now().saturating_duration_since(down) < min_down {
            let left = min_down.saturating_sub(now().saturating_duration_since(down));
            let _ = counter.next_line(|_| false, left);
        }
        t.link_up("b");
        let outage = now().saturating_duration_since(down);
        assert!(
            felt.is_ok(),
            "B did not notice a 1.5 s outage within the QP's budget: {:?}",
            counter.seen
        );

        // B recovers: 50 more FAAs acknowledged after the link is back.
        counter.drain();
        let ok_at_up = counter
            .seen
            .iter()
            .rev()
            .find(|l| l.starts_with("progress "))
            .map_or(0, |l| number(l, "ok"));
        let after = counter.next_line(
            |l| l.starts_with("progress ") && number(l, "ok") >= ok_at_up + 50,
            Duration::from_secs(45),
        );
        assert!(
            after.is_ok(),
            "B did not recover after the link came back: {:?}",
            counter.seen
        );

        counter.send("stop");
        let (status, out) = counter.finish(SHORT);
        assert!(status.success(), "faa-loop: {status}");
        let result = line_with(&out, "result ");
        let (s, u, f, v) = (
            number(result, "ok"),
            number(result, "unknown"),
            number(result, "failed"),
            number(result, "value"),
        );
        assert_eq!(
            number(result, "violations"),
            0,
            "a read broke S <= V <= S+U: {out:?}"
        );
        assert!(s <= v && v <= s + u, "S={s} U={u} V={v}: lost or doubled");

        // Another host reads the counter: still within the bounds (an unknown FAA may
        // still land late, never beyond S + U).
        let (status, out) = run(
            t.host("c"),
            "reader",
            &["get", "--connect", &addr, "--name", "counter", "--u64"],
            SHORT,
        );
        assert!(status.success(), "reader: {status} {out:?}");
        let vc = number(line_with(&out, "got "), "value");
        assert!(
            v <= vc && vc <= s + u,
            "C read {vc}; S={s} U={u} B's last read {v}"
        );

        let served = stop_node(node);
        log(&format!(
            "[flap] PASSED: link of b down {} ms ({}); before the outage {}; FAAs: S={s} \
             acknowledged, U={u} outcome unknown, F={f} known not run; V={v} (B), {vc} (C) \
             within [S, S+U]; B's reads during the loop: {} ok, {} failed and retried; \
             permission acquired again {} times; node: {served}",
            outage.as_millis(),
            match felt {
                Ok(l) => format!("B saw: {l}"),
                Err(e) => format!("B saw no error ({e:?})"),
            },
            before,
            number(result, "reads_ok"),
            number(result, "reads_failed"),
            number(result, "reacquired"),
        ));
    });
}

/// (d) Two memory nodes serve one client process through the multi-node handle (`NodeSet`):
/// objects placed on both, each read back from its own node by its global address.
#[test]
fn one_client_process_uses_two_memory_nodes() {
    run_or_skip("one_client_process_uses_two_memory_nodes", || {
        let t = Topology::new("nodes", 4, &["a1", "a2", "b"]);
        let (node1, addr1) = start_node(&t, "a1", 2000);
        let (node2, addr2) = start_node(&t, "a2", 2000);
        let (status, out) = run(
            t.host("b"),
            "two-nodes",
            &["two-nodes", "--node", &addr1, "--node", &addr2],
            SHORT,
        );
        assert!(status.success(), "two-nodes: {status} {out:?}");
        for addr in [&addr1, &addr2] {
            let read = out
                .iter()
                .find(|l| l.starts_with(&format!("read node={addr} ")))
                .unwrap_or_else(|| panic!("nothing read from {addr}: {out:?}"));
            assert!(
                read.ends_with(&format!("text=object on memory node {addr}")),
                "{read}"
            );
        }
        line_with(&out, "two-nodes ok");
        let (s1, s2) = (stop_node(node1), stop_node(node2));
        log(&format!(
            "[nodes] PASSED: b ({}) allocated, wrote and read back on {addr1} and {addr2}; \
             nodes: {s1} / {s2}",
            t.host("b").addr
        ));
    });
}

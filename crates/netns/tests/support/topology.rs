//! Hosts in network namespaces, joined by a bridge in a switch namespace.
//!
//! ```text
//!   ns <run>-a (198.18.S.1)   ns <run>-b (198.18.S.2)   ns <run>-c (198.18.S.3)
//!        eth0                      eth0                      eth0
//!         |  veth pair              |                         |
//!        p-a ---------------------- p-b ---------------------- p-c
//!                          br0 in ns <run>-sw (the switch)
//! ```
//!
//! Every device is created inside a namespace of the run (`ip -n NS link add ... peer ...
//! netns NS2`), never in the caller's, and every address is from the benchmark range
//! 198.18.0.0/15 on a subnet of its own: no packet leaves the namespaces the test made.
//! Names carry the test process's id, so concurrent runs and tests never collide; dropping
//! the [`Topology`] deletes its namespaces (and with them their veth pairs and bridge), on
//! success, failure or panic alike. Namespaces left by a run whose process is gone (killed
//! before its guards ran) are removed by the next run.

use super::{log, now, pause};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

/// Namespace names start with this, then the test process's id.
const PREFIX: &str = "pnt";

/// One host: a namespace with `eth0` on the switch.
#[derive(Clone, Debug)]
pub struct Host {
    /// The test's short name (in every log line of its processes).
    pub test: String,
    /// Short name in the test (`a`, `b`, ...).
    pub name: String,
    /// The namespace.
    pub ns: String,
    /// Its address on the switch.
    pub addr: Ipv4Addr,
    /// The switch's port (veth end in the switch namespace) of this host.
    pub port: String,
}

/// A switch namespace and hosts on it; deleted on drop.
#[derive(Debug)]
pub struct Topology {
    /// Every namespace made so far (deleted on drop, also after a failed setup).
    namespaces: Vec<String>,
    test: String,
    switch: String,
    hosts: Vec<Host>,
}

/// Runs `ip ARGS`; the error says which command failed and why.
pub fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {} ({})",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim(),
            out.status
        ))
    }
}

/// Checks that this kernel lets us make a namespace with a bridge and a veth pair in it.
pub fn probe() -> Result<(), String> {
    let ns = format!("{PREFIX}{}-probe", std::process::id());
    ip(&["netns", "add", &ns])?;
    let made = ip(&["-n", &ns, "link", "add", "br0", "type", "bridge"]).and_then(|_| {
        ip(&[
            "-n", &ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ])
    });
    let _ = ip(&["netns", "del", &ns]);
    made.map(|_| ())
}

impl Topology {
    /// A switch and `hosts` (short names) on subnet 198.18.`subnet`.0/24, host i at
    /// 198.18.`subnet`.(i+1); waits (bounded) until every link is up.
    pub fn new(test: &str, subnet: u8, hosts: &[&str]) -> Topology {
        remove_stale();
        let run = format!("{PREFIX}{}{test}", std::process::id());
        let mut t = Topology {
            namespaces: Vec::new(),
            test: test.to_string(),
            switch: format!("{run}-sw"),
            hosts: Vec::new(),
        };
        if let Err(e) = t.build(&run, subnet, hosts) {
            panic!("building the topology of {test}: {e}");
        }
        log(&format!(
            "[{test}] topology: switch namespace {} (bridge br0), hosts {}",
            t.switch,
            t.hosts
                .iter()
                .map(|h| format!("{}={} in {} (port {})", h.name, h.addr, h.ns, h.port))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        t
    }

    fn build(&mut self, run: &str, subnet: u8, hosts: &[&str]) -> Result<(), String> {
        let sw = self.switch.clone();
        self.add_namespace(&sw)?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for (i, name) in hosts.iter().enumerate() {
            let ns = format!("{run}-{name}");
            self.add_namespace(&ns)?;
            let port = format!("p-{name}");
            // The pair is made in the switch namespace with its other end moved straight into
            // the host's: no device ever appears in the caller's namespace.
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            let host_no = u8::try_from(i + 1).map_err(|_| "too many hosts".to_string())?;
            let addr = Ipv4Addr::new(198, 18, subnet, host_no);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            self.hosts.push(Host {
                test: self.test.clone(),
                name: name.to_string(),
                ns,
                addr,
                port,
            });
        }
        for h in self.hosts.clone() {
            self.wait_link(&h, true)?;
        }
        Ok(())
    }

    fn add_namespace(&mut self, ns: &str) -> Result<(), String> {
        ip(&["netns", "add", ns])?;
        self.namespaces.push(ns.to_string());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> &Host {
        match self.hosts.iter().find(|h| h.name == name) {
            Some(h) => h,
            None => panic!("no host {name} in this topology"),
        }
    }

    /// Takes `host`'s switch port down (the cable pulled at the switch: the host keeps its
    /// address and routes, its packets go nowhere) and waits until the host sees it.
    pub fn link_down(&self, host: &str) {
        let h = self.host(host);
        if let Err(e) = ip(&["-n", &self.switch, "link", "set", &h.port, "down"])
            .and_then(|_| self.wait_link(h, false))
        {
            panic!("taking {host}'s link down: {e}");
        }
    }

    /// Brings `host`'s switch port back up and waits until the link is up at both ends.
    pub fn link_up(&self, host: &str) {
        let h = self.host(host);
        if let Err(e) = ip(&["-n", &self.switch, "link", "set", &h.port, "up"])
            .and_then(|_| self.wait_link(h, true))
        {
            panic!("bringing {host}'s link up: {e}");
        }
    }

    /// Polls (bounded: 10 s) until `host`'s `eth0` and its switch port are both up, or, for
    /// `up == false`, until `eth0` has lost its carrier.
    fn wait_link(&self, h: &Host, up: bool) -> Result<(), String> {
        let deadline = now() + Duration::from_secs(10);
        loop {
            let host_side = ip(&["-n", &h.ns, "-o", "link", "show", "eth0"])?;
            let switch_side = ip(&["-n", &self.switch, "-o", "link", "show", &h.port])?;
            let done = if up {
                host_side.contains("state UP") && switch_side.contains("state UP")
            } else {
                !host_side.contains("state UP")
            };
            if done {
                return Ok(());
            }
            if now() > deadline {
                return Err(format!(
                    "{} not {} after 10 s: {host_side} / {switch_side}",
                    h.ns,
                    if up { "up" } else { "down" }
                ));
            }
            pause();
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let mut removed = Vec::new();
        for ns in self.namespaces.iter().rev() {
            match ip(&["netns", "del", ns]) {
                Ok(_) => removed.push(ns.as_str()),
                Err(e) => log(&format!("cleanup: {e}")),
            }
        }
        log(&format!(
            "[{}] removed namespaces {}",
            self.test,
            removed.join(", ")
        ));
    }
}

/// Deletes namespaces of earlier runs (`pnt<pid>...`) whose process no longer exists.
fn remove_stale() {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if pid.is_empty() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Its processes first (helpers of a test process that was killed), so the namespace
        // and its links really go.
        if let Ok(pids) = ip(&["netns", "pids", name]) {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        if ip(&["netns", "del", name]).is_ok() {
            log(&format!(
                "removed stale namespace {name} (its run, pid {pid}, is gone)"
            ));
        }
    }
}

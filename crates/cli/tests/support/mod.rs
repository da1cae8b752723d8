//! What the process tests share: a `patronus serve` started on free ports, read up to the
//! lines that name its addresses, and stopped with SIGTERM.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};

/// The `patronus` binary cargo built for these tests.
pub const EXE: &str = env!("CARGO_BIN_EXE_patronus");

/// A running `patronus serve`: killed on drop if a test fails before it stopped.
#[derive(Debug)]
pub struct Served {
    child: Child,
    out: BufReader<ChildStdout>,
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The admin endpoint.
    pub admin: SocketAddr,
    /// The lines it printed before serving (`listening …`, `admin …`), as printed.
    pub banner: Vec<String>,
}

impl Served {
    /// `patronus serve ARGS --listen 127.0.0.1:0 --admin 127.0.0.1:0`, once it prints where it
    /// listens.
    pub fn start(args: &[&str]) -> Served {
        let mut child = Command::new(EXE)
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn patronus serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut banner = Vec::new();
        for _ in 0..2 {
            let mut line = String::new();
            out.read_line(&mut line)
                .expect("serve prints its addresses");
            banner.push(line.trim_end().to_string());
        }
        let listen = banner[0]
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("`listening ADDR`, got {banner:?}"))
            .parse()
            .expect("an address");
        let admin = banner[1]
            .strip_prefix("admin http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("`admin http://ADDR/metrics …`, got {banner:?}"))
            .parse()
            .expect("an address");
        Served {
            child,
            out,
            listen,
            admin,
            banner,
        }
    }

    /// The next line it prints (waiting until it does).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("serve prints a line");
        line.trim_end().to_string()
    }

    /// Sends it `signal` (`HUP`, `TERM`, …).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal}");
    }

    /// SIGTERM; the rest of its output once it exited, which it must have done successfully.
    pub fn terminate(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM");
        let mut rest = String::new();
        for l in (&mut self.out).lines() {
            rest.push_str(&l.expect("a line"));
            rest.push('\n');
        }
        assert!(
            self.child.wait().expect("serve exits").success(),
            "serve exits 0: {rest}"
        );
        rest
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! `redis-server` in a process of its own, on a free loopback port, persistence off, and the
//! [`KvConnection`] to it through the `redis` crate (GET/SET; a batch is one pipeline).

use super::store::{KvConnection, KvRequest};
use crate::harness::process::{ServerProcess, which};
use anyhow::{Context as _, Result};
use std::net::{Ipv4Addr, TcpListener};

/// A running `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    process: ServerProcess,
    port: u16,
}

impl RedisServer {
    /// Whether `redis-server` is installed.
    pub fn available() -> bool {
        which("redis-server")
    }

    /// Starts one on a free loopback port, pinned to `core` if given, without persistence.
    pub fn start(core: Option<usize>) -> Result<Self> {
        // The port is free when asked for; another process taking it in between makes the
        // server fail to start, and the error says so.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let args = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--io-threads",
            "1",
        ]
        .map(String::from);
        let (process, ()) = ServerProcess::start("redis-server", &args, core, |line| {
            line.contains("Ready to accept connections").then_some(())
        })
        .context("starting redis-server")?;
        Ok(RedisServer { process, port })
    }

    /// The server process (its CPU time, its core).
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// A new connection.
    pub fn connect(&self) -> Result<RedisConnection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let conn = client
            .get_connection()
            .context("connecting to redis-server")?;
        Ok(RedisConnection { conn })
    }
}

/// One connection to a `redis-server`.
pub struct RedisConnection {
    conn: redis::Connection,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection").finish_non_exhaustive()
    }
}

impl KvConnection for RedisConnection {
    fn batch(&mut self, ops: &[KvRequest<'_>]) -> Result<Vec<Option<Vec<u8>>>> {
        if let [op] = ops {
            // Unpipelined: one command, one round trip.
            return Ok(vec![match *op {
                KvRequest::Get(k) => redis::cmd("GET").arg(k).query(&mut self.conn)?,
                KvRequest::Put(k, v) => {
                    redis::cmd("SET").arg(k).arg(v).exec(&mut self.conn)?;
                    None
                }
            }]);
        }
        let mut pipe = redis::pipe();
        for op in ops {
            match *op {
                KvRequest::Get(k) => pipe.cmd("GET").arg(k),
                KvRequest::Put(k, v) => pipe.cmd("SET").arg(k).arg(v).ignore(),
            };
        }
        let gets: Vec<Option<Vec<u8>>> = pipe.query(&mut self.conn)?;
        // Ignored SETs have no entry: put the gets' answers back in their places.
        let mut gets = gets.into_iter();
        Ok(ops
            .iter()
            .map(|op| match op {
                KvRequest::Get(_) => gets.next().flatten(),
                KvRequest::Put(..) => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gets_and_puts_one_at_a_time_and_pipelined() {
        if !RedisServer::available() {
            eprintln!("SKIPPED: redis-server is not installed");
            return;
        }
        let server = RedisServer::start(None).unwrap();
        let mut c = server.connect().unwrap();
        assert_eq!(c.get(b"k1").unwrap(), None);
        c.put(b"k1", b"v1").unwrap();
        assert_eq!(c.get(b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
        let out = c
            .batch(&[
                KvRequest::Put(b"k2", b"v2"),
                KvRequest::Get(b"k1"),
                KvRequest::Get(b"nothing"),
                KvRequest::Get(b"k2"),
            ])
            .unwrap();
        assert_eq!(
            out,
            vec![None, Some(b"v1".to_vec()), None, Some(b"v2".to_vec())]
        );
        assert!(server.process().cpu_time().unwrap() > std::time::Duration::ZERO);
    }
}

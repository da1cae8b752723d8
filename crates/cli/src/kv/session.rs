//! One command's client: connecting, opening the table by name, closing.

use super::KvArgs;
use super::error::KvError;
use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_ods::PatronusMemory;
use patronus_ods::race::{self, ClientOptions, TableClient};
use rnic::soft::{SoftAddress, SoftConfig, SoftContext, SoftProvider, TcpNode};
use std::net::SocketAddr;
use std::time::Duration;

/// Remote memory of a `kv` command.
pub type Mem = PatronusMemory<SoftProvider>;

/// A connected client: its device (kept open while it is used) and its remote memory.
pub struct Session {
    pub mem: Mem,
    _ctx: SoftContext,
}

impl Session {
    /// Connects to the node of `args` as its tenant.
    pub fn connect(args: &KvArgs) -> Result<Self, KvError> {
        let tcp = args
            .tls
            .tcp()
            .map_err(|e| KvError::Other(format!("{e:#}")))?;
        let ctx = TcpNode::open_with(
            SoftConfig::default(),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            tcp,
        )
        .map_err(|e| KvError::Other(format!("opening the local TCP device: {e}")))?;
        let mut cfg = ClientConfig {
            rpc_timeout: Duration::from_millis(args.timeout_ms),
            // One short-lived process: no spare QPs prepared, no recovery thread.
            spare_qps: 0,
            background_recovery: false,
            ..ClientConfig::default()
        };
        if let Some(t) = args.tenant {
            cfg.tenant = t.tenant;
            cfg.tenant_secret = t.secret;
        }
        let tenant = args.tenant.map(|t| t.tenant);
        let addr = args.connect;
        let client =
            Client::<SoftProvider>::connect(&ctx, &SoftAddress::Tcp(addr), cfg).map_err(|why| {
                match why {
                    ClientError::Unauthorized => KvError::Refused { addr, tenant },
                    ClientError::SessionEnded(why) => KvError::SessionEnded { addr, why },
                    why => KvError::Unreachable { addr, why },
                }
            })?;
        Ok(Session {
            mem: PatronusMemory::new(client),
            _ctx: ctx,
        })
    }

    /// Opens `args`' table, runs `op` on it, and closes it (whatever `op` returned).
    pub fn with_table<T>(
        &mut self,
        args: &KvArgs,
        op: impl FnOnce(&mut TableClient<Mem>, &mut Mem) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let mut t = race::open_named(&mut self.mem, &args.table, table_options(args))
            .map_err(|e| KvError::from_race(&args.table, e))?;
        let result = op(&mut t, &mut self.mem);
        if let Err(e) = t.close(&mut self.mem) {
            // The operation's outcome stands; what could not be given back is reported.
            eprintln!(
                "warning: closing table \"{}\": {}",
                args.table,
                KvError::from_race(&args.table, e)
            );
        }
        result
    }
}

/// A command's table client: its rights last `--lease-ms` and are renewed while it works;
/// each is revoked when given up (nothing left to lapse after the process); one KV block is
/// allocated at a time (a `put` uses one).
pub fn table_options(args: &KvArgs) -> ClientOptions {
    let lease = Duration::from_millis(args.lease_ms);
    ClientOptions {
        lease,
        read_lease: lease,
        margin: lease / 5,
        preallocate: 1,
        split_lease: lease,
        fence_gap: lease,
        lapse: false,
        // About as long as a few seconds of polls: a vanilla lock word a stopped resizer
        // keeps would stall a writer for good.
        max_wait_polls: 1 << 16,
        ..ClientOptions::default()
    }
}

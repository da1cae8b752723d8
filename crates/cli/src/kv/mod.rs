//! `patronus kv`: a key-value tool on a named RACE hash table of a running `patronus serve`.
//!
//! Each command is one short-lived client: it connects (as the tenant given), looks the
//! table up by name, opens it, does its one operation, and closes — it revokes the rights it
//! holds (rather than leaving them to lapse) and frees the KV blocks it allocated and did not
//! link — then disconnects, which ends its session at the memory node and every permission
//! still in it. What stays is the table's memory, which belongs to the tenant.
//!
//! - `error`: exit codes and messages; `output`: value formats;
//! - `session`: connecting and opening the table; `commands`: the commands.

mod commands;
mod error;
mod output;
mod session;

pub use error::EXIT_CODES_HELP;

use crate::serve::{TenantArg, parse_tenant};
use clap::{Args, Subcommand, ValueEnum};
use output::{LineFormat, ValueFormat};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// `patronus kv`'s arguments.
#[derive(Args, Debug)]
pub struct KvArgs {
    /// The memory node, HOST:PORT (the address `patronus serve` prints).
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    connect: SocketAddr,
    /// Act as this tenant, ID:SECRET (SECRET decimal or 0x-hex). Default: tenant 0, for a node
    /// served without --tenant. Tables are per tenant.
    #[arg(long, value_parser = parse_tenant)]
    tenant: Option<TenantArg>,
    /// The table's name (1 to 32 bytes).
    #[arg(long, default_value = "kv", value_parser = parse_table_name)]
    table: String,
    /// KEY arguments are hex (for binary keys; see `scan --format hex`).
    #[arg(long)]
    key_hex: bool,
    /// Lease of the permissions this process holds, ms; keep it at most half the node's
    /// --max-lifetime-ms (a resizer's lock lasts twice this).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    lease_ms: u64,
    /// How long to wait for the memory node's answer to a control request, ms.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
    /// TLS to the node.
    #[command(flatten)]
    tls: crate::tls::TlsArgs,
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Subcommand, Debug)]
enum KvCommand {
    /// Create an empty table and publish it under --table (exit code 5 if the name is taken).
    Create(ShapeArgs),
    /// Set KEY's value: inserted if the key is absent, updated if present. The value comes from
    /// VALUE or, binary-safe, from --value-file (`-`: stdin).
    Put {
        /// The key.
        key: String,
        /// The value (UTF-8 text).
        #[arg(required_unless_present = "value_file")]
        value: Option<String>,
        /// Read the value from this file (`-`: stdin), byte for byte.
        #[arg(long, value_name = "PATH", conflicts_with = "value")]
        value_file: Option<PathBuf>,
    },
    /// Print KEY's value (exit code 3 if the table does not hold KEY).
    Get {
        /// The key.
        key: String,
        /// How the value is printed.
        #[arg(long, value_enum, default_value = "text")]
        format: ValueFormat,
    },
    /// Remove KEY (exit code 3 if the table does not hold KEY).
    Del {
        /// The key.
        key: String,
    },
    /// Print every key and value, one `key<TAB>value` line each, sorted by key (a full
    /// scan of the unordered table; not a snapshot while others write).
    Scan {
        /// How keys and values are printed.
        #[arg(long, value_enum, default_value = "text")]
        format: LineFormat,
    },
    /// Print the table's shape and what it holds.
    Info,
    /// Free the table and withdraw its name. No other client may be using it; refused
    /// (exit code 1, nothing freed) while one holds a subtable's lock.
    Drop,
}

/// The shape of a new table (`RaceConfig`).
#[derive(Args, Debug)]
struct ShapeArgs {
    /// Bytes of a KV block: a 32-byte header, the key and the value (a multiple of 64,
    /// 64..=8128). Bounds key + value.
    #[arg(long, default_value_t = 256)]
    block_size: u32,
    /// The deepest a subtable may split to: at most 2^max-depth subtables (0..=16).
    #[arg(long, default_value_t = 12)]
    max_depth: u8,
    /// Subtables at creation: 2^initial-depth (at most max-depth).
    #[arg(long, default_value_t = 1)]
    initial_depth: u8,
    /// Bucket groups per subtable (three buckets each); a subtable fits in 256 KiB.
    #[arg(long, default_value_t = 64)]
    groups: u32,
    /// Slots per bucket (1..=63).
    #[arg(long, default_value_t = 7)]
    slots: u8,
    /// How a resizer locks a subtable it splits.
    #[arg(long, value_enum, default_value = "lease")]
    lock: LockArg,
    /// Seed of the key hash (default: the library's).
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LockArg {
    /// An exclusive permission on the subtable's lock object (Patronus): a resizer that
    /// stops holds it only until its lease ends.
    Lease,
    /// A lock word taken by CAS (vanilla RACE): a resizer that stops holds it for good.
    Word,
}

/// `HOST:PORT`, resolved (the first address).
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let bad = |why: String| format!("`{s}`: expected HOST:PORT ({why})");
    let mut addrs = s.to_socket_addrs().map_err(|e| bad(e.to_string()))?;
    addrs.next().ok_or_else(|| bad("no address".into()))
}

/// A table name: what a named root may be called (1 to 32 bytes of UTF-8, no NUL).
fn parse_table_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 32 || s.contains('\0') {
        return Err(format!("`{s}`: a table name is 1 to 32 bytes without NUL"));
    }
    Ok(s.to_string())
}

/// Runs `patronus kv`; the process exit code.
pub fn run(args: &KvArgs) -> i32 {
    match commands::run(args) {
        Ok(()) => error::EXIT_OK,
        Err(e) => {
            eprintln!("error: {}", crate::errors::one_line(&e));
            e.exit_code()
        }
    }
}

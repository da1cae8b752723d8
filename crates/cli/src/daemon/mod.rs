//! `patronus serve`: the memory-node daemon. Configured from a file, flags and environment
//! (`config`, `flags`), watched through an admin endpoint (`admin`: Prometheus `/metrics`,
//! `/status`), logging through `tracing` (levels from `RUST_LOG`), stopped by SIGINT or
//! SIGTERM — never by its stdin closing, so systemd and CI can run it.
//!
//! A stop is graceful: the node stops taking connections and new permissions, lets the live
//! leases end (or their holders revoke them) for up to `shutdown_grace_ms`, reports what was
//! still outstanding, and exits 0.

pub mod admin;
pub mod config;
pub mod flags;
pub mod metrics;
pub mod report;
pub mod view;

use admin::{Admin, AdminState};
use anyhow::{Context as _, Result};
use config::{DaemonConfig, ProviderSetting};
use flags::ServeFlags;
use patronus_core::MemoryNode;
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode, TcpOptions};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use view::{NodeView, Served};

/// Runs `patronus serve`.
pub fn run(flags: &ServeFlags) -> Result<()> {
    if flags.print_default_config {
        print!("{}", config::DEFAULT_FILE);
        return Ok(());
    }
    let cfg = flags.config()?;
    init_logging();
    // Before the node announces itself: a signal sent as soon as `listening` shows is caught.
    let signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing signal handlers")?;
    match cfg.provider {
        ProviderSetting::Soft => {
            let tls = cfg.tls.options()?;
            if tls.is_some() {
                tracing::info!(
                    plaintext = cfg.tls.allow_plaintext,
                    "TLS 1.3 with client certificates on every client connection"
                );
            }
            let tcp = TcpOptions {
                spin_polls: cfg.engine_spin_polls,
                tls: tls.clone(),
                ..TcpOptions::default()
            };
            let device = SoftConfig {
                huge_pages: cfg.huge_pages,
                ..SoftConfig::default()
            };
            let listening = || format!("listening for clients on {}", cfg.listen);
            let ctx = TcpNode::open_with(device, cfg.listen, tcp).with_context(listening)?;
            let node = MemoryNode::<SoftProvider>::start(ctx, cfg.node_config()?)
                .with_context(listening)?;
            if cfg.huge_pages {
                tracing::info!(
                    anon_huge_pages_kib = huge_page_kib(),
                    "pool advised for transparent huge pages"
                );
            }
            let listen = match node.address() {
                SoftAddress::Tcp(a) => a.to_string(),
                other => format!("{other:?}"),
            };
            serve(node, &cfg, listen, signals, tls)
        }
        ProviderSetting::Rdma => {
            if cfg.huge_pages {
                tracing::warn!("huge_pages applies to the software RNIC's pool only; ignored");
            }
            let (node, listen) = crate::rdma::start(&cfg.device, cfg.listen, cfg.node_config()?)?;
            serve(node, &cfg, listen, signals, None)
        }
    }
}

/// The process's anonymous memory on huge pages, KiB (`AnonHugePages` of
/// `/proc/self/smaps_rollup`; 0 where it cannot be read).
fn huge_page_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("AnonHugePages:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `RUST_LOG` levels (default: info) to stderr.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second initialisation (tests running several daemons in one process) keeps the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[allow(clippy::disallowed_methods)] // a daemon's uptime and grace period are wall time
fn serve<P: rnic::Provider>(
    node: MemoryNode<P>,
    cfg: &DaemonConfig,
    listen: String,
    mut signals: Signals,
    tls: Option<rnic::soft::TlsOptions>,
) -> Result<()>
where
    MemoryNode<P>: Send + Sync + 'static,
{
    let served = Arc::new(Served {
        node,
        pool_bytes: cfg.pool_mib << 20,
    });
    let view: Arc<dyn NodeView> = served.clone();
    let state = Arc::new(AdminState {
        node: view,
        listen: listen.clone(),
        started: Instant::now(),
        draining: Default::default(),
        token: match cfg.admin_token_file.as_str() {
            "" => None,
            path => Some(admin::read_token(path)?),
        },
    });
    let admin = match cfg.admin.as_str() {
        "" => None,
        a => Some(Admin::start(a.parse()?, state.clone())?),
    };
    println!("listening {listen}");
    if let Some(a) = &admin {
        println!(
            "admin http://{}/metrics http://{}/status",
            a.addr(),
            a.addr()
        );
    }
    tracing::info!(
        listen = %listen,
        admin = %admin.as_ref().map_or("none".into(), |a| a.addr().to_string()),
        pool_mib = cfg.pool_mib,
        shards = cfg.shards,
        max_lease_ms = cfg.max_lease_ms,
        tenants = cfg.tenant.len(),
        "memory node serving"
    );
    if open_to_anyone(&cfg.listen, cfg.tenant.len()) {
        tracing::warn!(
            listen = %cfg.listen,
            "no tenants configured on a non-loopback address: anyone who can reach it is the \
             one default tenant and may take every object, window and byte of the pool \
             (configure [[tenant]] or --tenant ID:SECRET)"
        );
    }
    // SIGHUP reloads the TLS certificates, key and CA (new connections use them; sessions
    // keep theirs); SIGINT or SIGTERM drains the node.
    let mut signal = SIGTERM;
    for s in signals.forever() {
        if s != SIGHUP {
            signal = s;
            break;
        }
        reload_tls(cfg, tls.as_ref());
    }
    let name = if signal == SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    state.draining.store(true, Ordering::SeqCst);
    served.node.drain();
    let (status, stats) = served.node.status();
    println!(
        "{name}: draining — {} live permissions, {} sessions; waiting up to {} ms for their leases",
        status.permissions_total, stats.held.sessions, cfg.shutdown_grace_ms
    );
    tracing::info!(signal = name, live = status.permissions_total, "draining");
    let deadline = Instant::now() + Duration::from_millis(cfg.shutdown_grace_ms);
    let mut live = status.permissions_total;
    while live > 0 && Instant::now() < deadline {
        // Each look is a fresh snapshot from every shard (it blocks until they publish).
        std::thread::park_timeout(Duration::from_millis(20));
        live = served.node.status().0.permissions_total;
    }
    let stats = served.node.fresh_stats();
    if live == 0 {
        println!("shutdown: every lease ended");
    } else {
        println!(
            "shutdown: {live} permissions still live after {} ms; they end with the node (their windows die with it)",
            cfg.shutdown_grace_ms
        );
    }
    crate::serve::print_served(&stats);
    drop(admin);
    drop(state);
    if let Ok(served) = Arc::try_unwrap(served) {
        served.node.shutdown();
    }
    Ok(())
}

/// Reads the TLS files again and makes new connections use them (`serve` on SIGHUP); a file
/// that does not load keeps the node on its current certificates, and says why.
fn reload_tls(cfg: &DaemonConfig, tls: Option<&rnic::soft::TlsOptions>) {
    let Some(tls) = tls else {
        println!("SIGHUP: no TLS configured; nothing to reload");
        return;
    };
    match cfg.tls.options() {
        Ok(Some(next)) => {
            tls.reload(&next);
            println!("SIGHUP: reloaded the TLS certificate, key and client CA");
            tracing::info!("TLS files reloaded");
        }
        Ok(None) => println!("SIGHUP: no TLS configured; nothing to reload"),
        Err(e) => {
            println!("SIGHUP: kept the current TLS files: {e:#}");
            tracing::warn!("TLS reload failed: {e:#}");
        }
    }
}

/// Whether a node listening on `listen` with `tenants` configured tenants serves anyone who
/// can reach it as the one default tenant: no tenants, and an address that is not loopback
/// (an unspecified address listens on every interface).
fn open_to_anyone(listen: &std::net::SocketAddr, tenants: usize) -> bool {
    tenants == 0 && !listen.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::open_to_anyone;

    #[test]
    fn only_a_reachable_node_without_tenants_is_open_to_anyone() {
        let open = |a: &str, tenants| open_to_anyone(&a.parse().unwrap(), tenants);
        assert!(!open("127.0.0.1:7471", 0));
        assert!(!open("[::1]:7471", 0));
        assert!(open("0.0.0.0:7471", 0));
        assert!(open("10.1.2.3:7471", 0));
        assert!(open("[::]:7471", 0));
        assert!(!open("0.0.0.0:7471", 2));
    }
}

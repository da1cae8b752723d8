//! The admin endpoint: `GET /metrics` (Prometheus text), `GET /status` (the status report,
//! JSON), `GET /healthz`, on its own thread. Loopback by default (`docs/operations.md`).
//!
//! Invariant: serves only what [`metrics`] and [`StatusReport`] hold — no rkeys, no secrets.
//! With a token (`admin_token_file`), `/metrics` and `/status` answer only requests that carry
//! it (`Authorization: Bearer …`, compared in constant time); `/healthz` stays open.

use super::metrics;
use super::report::StatusReport;
use super::view::NodeView;
use anyhow::{Result, anyhow};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

/// What the endpoint serves from.
#[derive(Debug)]
pub struct AdminState {
    /// The node.
    pub node: Arc<dyn NodeView>,
    /// Where clients connect (shown in the status).
    pub listen: String,
    /// When the daemon started.
    pub started: Instant,
    /// Set once the node drains.
    pub draining: AtomicBool,
    /// The bearer token `/metrics` and `/status` require, if any.
    pub token: Option<String>,
}

/// A file's bearer token: its content without surrounding white space, not empty.
pub fn read_token(path: &str) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("admin_token_file {path}: cannot read: {e}"))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(anyhow!(
            "admin_token_file {path}: must hold one token (no spaces), not empty"
        ));
    }
    Ok(token.to_string())
}

/// Whether `authorization` (the request's header) carries `token`.
fn authorized(token: &str, authorization: Option<&str>) -> bool {
    use subtle::ConstantTimeEq as _;
    let Some(given) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
        return false;
    };
    bool::from(given.trim().as_bytes().ct_eq(token.as_bytes()))
}

/// A running admin endpoint.
pub struct Admin {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Admin {
    /// Listens on `addr` and serves from `state` on a thread of its own.
    pub fn start(addr: SocketAddr, state: Arc<AdminState>) -> Result<Admin> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow!("admin endpoint {addr}: cannot listen: {e}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow!("admin endpoint {addr}: not an IP address"))?;
        let server = Arc::new(server);
        let serving = server.clone();
        let registry = metrics::registry(state.node.clone());
        let thread = std::thread::Builder::new()
            .name("patronus-admin".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    let authorization = request
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("Authorization"))
                        .map(|h| h.value.as_str().to_string());
                    let response = respond(
                        &state,
                        &registry,
                        request.method(),
                        request.url(),
                        authorization.as_deref(),
                    );
                    if let Err(e) = request.respond(response) {
                        tracing::debug!("admin: answering failed: {e}");
                    }
                }
            })?;
        Ok(Admin {
            server,
            thread: Some(thread),
            addr,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn with_type(body: String, content_type: &str, code: u16) -> Response {
    let mut r = tiny_http::Response::from_string(body).with_status_code(code);
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()) {
        r.add_header(h);
    }
    r
}

#[allow(clippy::disallowed_methods)] // uptime is wall time
fn respond(
    state: &AdminState,
    registry: &prometheus_client::registry::Registry,
    method: &tiny_http::Method,
    url: &str,
    authorization: Option<&str>,
) -> Response {
    if *method != tiny_http::Method::Get {
        return with_type("only GET\n".into(), "text/plain", 405);
    }
    let path = url.split('?').next().unwrap_or("");
    if let Some(token) = &state.token
        && path != "/healthz"
        && !authorized(token, authorization)
    {
        let mut r = with_type(
            "unauthorized: send `Authorization: Bearer <token>` (the node's admin_token_file)\n"
                .into(),
            "text/plain",
            401,
        );
        if let Ok(h) = tiny_http::Header::from_bytes(&b"WWW-Authenticate"[..], &b"Bearer"[..]) {
            r.add_header(h);
        }
        return r;
    }
    match path {
        "/metrics" => with_type(
            metrics::encode(registry),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            200,
        ),
        "/status" => {
            let (status, stats) = state.node.status();
            let report = StatusReport::new(
                &state.listen,
                state.started.elapsed().as_secs_f64(),
                state.node.pool_bytes(),
                (
                    state.draining.load(Ordering::SeqCst),
                    state.node.unenforced_window_bounds(),
                ),
                &status,
                &stats,
            );
            match serde_json::to_string(&report) {
                Ok(json) => with_type(json, "application/json", 200),
                Err(e) => with_type(format!("status: {e}\n"), "text/plain", 500),
            }
        }
        "/healthz" => with_type("ok\n".into(), "text/plain", 200),
        _ => with_type(
            "not found: /metrics, /status, /healthz\n".into(),
            "text/plain",
            404,
        ),
    }
}

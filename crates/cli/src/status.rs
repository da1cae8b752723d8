//! `patronus status ADMIN`: a running node's status report (its admin endpoint's `/status`),
//! as tables or as JSON.

use crate::daemon::report::{EXPIRING_MS, StatusReport};
use anyhow::{Context as _, Result, anyhow};
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use std::net::SocketAddr;
use std::time::Duration;

/// Fetches the report from `admin` (with the bearer token in `token_file`, if given) and
/// prints it.
pub fn run(admin: SocketAddr, json: bool, token_file: Option<&str>) -> Result<()> {
    let token = token_file
        .map(crate::daemon::admin::read_token)
        .transpose()?;
    let report = fetch(admin, token.as_deref())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// The report a node's admin endpoint serves (`token`: its bearer token, if it wants one).
pub fn fetch(admin: SocketAddr, token: Option<&str>) -> Result<StatusReport> {
    let url = format!("http://{admin}/status");
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let mut request = agent.get(&url);
    if let Some(t) = token {
        request = request.set("Authorization", &format!("Bearer {t}"));
    }
    let body = request
        .call()
        .map_err(|e| not_answered(admin, &url, e))?
        .into_string()
        .with_context(|| format!("reading {url}"))?;
    serde_json::from_str(&body).with_context(|| format!("{url}: not a status report"))
}

/// Why `GET url` failed, in words: a peer that does not speak HTTP is most likely the port
/// clients connect to (its reply bytes are not worth printing).
fn not_answered(admin: SocketAddr, url: &str, e: ureq::Error) -> anyhow::Error {
    let t = match e {
        ureq::Error::Status(401, _) => {
            return anyhow!(
                "{url}: unauthorized: the node wants its admin token (--admin-token-file FILE)"
            );
        }
        ureq::Error::Status(code, _) => return anyhow!("{url}: HTTP status {code}"),
        ureq::Error::Transport(t) => t,
    };
    let io = std::error::Error::source(&t).and_then(|s| s.downcast_ref::<std::io::Error>());
    let garbled = matches!(
        t.kind(),
        ureq::ErrorKind::BadStatus | ureq::ErrorKind::BadHeader
    ) || io.is_some_and(|io| {
        use std::io::ErrorKind::{InvalidData, InvalidInput, Other};
        // ureq reports a reply that is no HTTP header this way (the bytes of a soft-NIC
        // frame, say); connection failures have kinds of their own.
        matches!(io.kind(), InvalidData | InvalidInput | Other)
    });
    if garbled {
        return anyhow!(
            "{admin} did not answer in HTTP: is it the node's admin address (its `admin` \
             setting) and not the port clients connect to?"
        );
    }
    let why = io.map_or_else(|| t.kind().to_string(), |io| io.to_string());
    anyhow!(
        "no admin endpoint answered at {admin} ({why}): is the node running, with this \
         `admin` address?"
    )
}

/// The report as text tables.
pub fn render(r: &StatusReport) -> String {
    let n = &r.node;
    let mut out = String::new();
    let mut node = Table::new();
    node.load_preset(UTF8_BORDERS_ONLY).set_header(["node", ""]);
    let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
    node.add_row(vec!["listening".into(), n.listen.clone()]);
    node.add_row(vec![
        "state".into(),
        if n.draining { "draining" } else { "serving" }.to_string(),
    ]);
    if n.unenforced_window_bounds {
        node.add_row(vec![
            "protection".to_string(),
            "WINDOW BOUNDS NOT ENFORCED by the NIC (allow_unenforced_window_bounds)".to_string(),
        ]);
    }
    node.add_row(vec!["uptime".into(), format!("{:.1} s", n.uptime_s)]);
    node.add_row(vec![
        "pool".into(),
        format!(
            "{} of {} bytes in use ({:.1} %), {} objects",
            n.pool_bytes_in_use,
            n.pool_bytes,
            pct(n.pool_bytes_in_use, n.pool_bytes),
            n.live_objects
        ),
    ]);
    node.add_row(vec![
        "headers / windows free".into(),
        format!(
            "{} of {} / {} of {}",
            n.headers.0, n.headers.1, n.windows.0, n.windows.1
        ),
    ]);
    node.add_row(vec![
        "permissions".into(),
        format!(
            "{} live, {} ending within {} ms; {} granted, {} ended",
            n.live_permissions, r.expiring_soon, EXPIRING_MS, n.granted, n.ended
        ),
    ]);
    node.add_row(vec!["sessions".into(), n.sessions.to_string()]);
    node.add_row(vec![
        "manager CPU".into(),
        format!(
            "{:.3} s ({:.3} s handling requests), {} shard(s)",
            n.manager_cpu_s, n.manager_busy_cpu_s, n.shards
        ),
    ]);
    out.push_str(&format!("{node}\n"));

    if !r.shares.is_empty() {
        let mut shares = Table::new();
        shares.load_preset(UTF8_BORDERS_ONLY).set_header([
            "class",
            "served",
            "cost units",
            "share",
            "refused",
            "mean wait",
            "max wait",
        ]);
        let units: u64 = r.shares.iter().map(|s| s.cost_units).sum();
        for s in &r.shares {
            shares.add_row(vec![
                s.class.clone(),
                s.served.to_string(),
                s.cost_units.to_string(),
                format!("{:.1} %", pct(s.cost_units, units)),
                s.refused.to_string(),
                format!("{:.3} ms", s.mean_queue_delay_ms),
                format!("{:.3} ms", s.max_queue_delay_ms),
            ]);
        }
        out.push_str(&format!("the manager's fair shares\n{shares}\n"));
    }
    if let Some(p) = &r.priority {
        out.push_str(&format!(
            "software priority: low priority {} (high-priority load {} ops/s; throttled {} \
             times, lifted {} times, over {} periods)\n\n",
            if p.throttled {
                "throttled"
            } else {
                "not throttled"
            },
            p.high_ops_per_s,
            p.engaged,
            p.lifted,
            p.periods
        ));
    }

    let mut perms = Table::new();
    perms.load_preset(UTF8_BORDERS_ONLY).set_header([
        "client",
        "tenant",
        "address",
        "bytes",
        "access",
        "mode",
        "lease left",
        "max left",
    ]);
    for p in &r.permissions {
        perms.add_row(vec![
            p.client.to_string(),
            p.tenant.map_or("-".into(), |t| t.to_string()),
            p.addr.clone(),
            p.len.to_string(),
            p.access.clone(),
            p.mode.clone(),
            format!("{:.1} ms", p.lease_left_ms),
            format!("{:.1} ms", p.hard_left_ms),
        ]);
    }
    out.push_str(&format!(
        "live permissions ({} listed of {}, soonest to end first)\n{perms}\n",
        r.permissions.len(),
        n.live_permissions
    ));

    let mut sessions = Table::new();
    sessions.load_preset(UTF8_BORDERS_ONLY).set_header([
        "client",
        "shard",
        "tenant",
        "from",
        "connected",
        "control QP",
        "data QPs",
    ]);
    for s in &r.sessions {
        sessions.add_row(vec![
            s.client.to_string(),
            s.shard.to_string(),
            s.tenant.map_or("-".into(), |t| t.to_string()),
            s.from.clone().unwrap_or_else(|| "-".into()),
            format!("{:.1} s", s.connected_s),
            s.control_qp.clone(),
            s.data_qps.join(" "),
        ]);
    }
    out.push_str(&format!("sessions\n{sessions}\n"));
    out
}

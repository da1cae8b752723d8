//! `patronus-scenario`: process-level runs of `patronus kv` against `patronus serve`, their
//! history checked by lincheck (see the library's docs and `docs/operations.md`).
//!
//! Exit status: 0 passed; 1 a violation, an undecided check, a hung invocation, or (busy) a
//! failed or slow invocation; 2 the run could not be made (no binary, the node would not
//! start).

use clap::{Args, Parser, Subcommand};
use scenario::run::{self, Config, Mode};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Scenario runs of `patronus kv` processes against `patronus serve`.
#[derive(Debug, Parser)]
#[command(name = "patronus-scenario", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Loops under seeded faults (kv SIGKILL and SIGSTOP, serve SIGSTOP and restarts); the
    /// history must be linearizable.
    Faults {
        #[command(flatten)]
        common: Common,
        /// How long the loops run (e.g. 60s, 10m); the faults' tail may add a few seconds.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        duration: Duration,
        /// kv loops in all (of which --inserters insert fresh keys).
        #[arg(long, default_value_t = 10)]
        loops: usize,
    },
    /// Loops with no fault while CPU burners share the cores: nothing may fail, no invocation
    /// may take longer than --max-latency, and the history must be linearizable.
    Busy {
        #[command(flatten)]
        common: Common,
        /// How long the loops run.
        #[arg(long, default_value = "600s", value_parser = parse_duration)]
        duration: Duration,
        /// kv loops in all (of which --inserters insert fresh keys).
        #[arg(long, default_value_t = 16)]
        loops: usize,
        /// CPU-burning processes.
        #[arg(long, default_value_t = 4)]
        burners: usize,
        /// An invocation longer than this fails the run.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        max_latency: Duration,
    },
    /// Spin a core until the parent is gone (the busy run's burners).
    #[command(hide = true)]
    Burn,
}

#[derive(Debug, Args)]
struct Common {
    /// Seeds the workload and the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Loops that insert fresh keys (the others work on the hot keys).
    #[arg(long, default_value_t = 2)]
    inserters: usize,
    /// Hot keys.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// The table: `split` (initial depth 0, 1 group of 2-slot buckets per subtable, max depth
    /// 14: it splits continuously) or `default` (`kv create`'s defaults).
    #[arg(long, default_value = "split", value_parser = ["split", "default"])]
    shape: String,
    /// The `patronus` binary (default: the one next to this binary, else
    /// target/release/patronus).
    #[arg(long)]
    patronus: Option<PathBuf>,
    /// Where the history, the invocations, the node logs and the report go (default:
    /// target/patronus-scenario/MODE-seedN).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The memory node's pool, MiB.
    #[arg(long, default_value_t = 64)]
    pool_mib: u32,
    /// Serve's admin endpoint on this address (IP:PORT); `patronus status --json` is then
    /// sampled every 5 s into status.jsonl (who holds what during a stall). Default: none.
    #[arg(long, value_name = "ADDR")]
    admin: Option<std::net::SocketAddr>,
    /// An invocation running this long is killed and reported as hung.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    hang: Duration,
    /// Give the checker at most this long (then the run is undecided: a failure).
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    check_time: Duration,
}

/// `60s`, `10m`, `500ms`, `1.5s`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: expected a duration such as 60s, 10m or 500ms"))?;
    let scale = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(n * scale).map_err(|e| format!("`{s}`: {e}"))
}

fn config(mode: Mode, c: Common, duration: Duration, loops: usize) -> Result<Config, String> {
    if c.inserters >= loops {
        return Err(format!(
            "--inserters {} leaves no loop for the hot keys (--loops {loops})",
            c.inserters
        ));
    }
    if c.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    let name = match mode {
        Mode::Faults => "faults",
        Mode::Busy => "busy",
    };
    let shape = run::shape_args(c.shape == "split");
    Ok(Config {
        mode,
        patronus: c.patronus.unwrap_or_else(run::default_patronus),
        out: c.out.unwrap_or_else(|| {
            PathBuf::from(format!("target/patronus-scenario/{name}-seed{}", c.seed))
        }),
        duration,
        seed: c.seed,
        loops,
        inserters: c.inserters,
        keys: c.keys,
        shape,
        pool_mib: c.pool_mib,
        admin: c.admin,
        burners: 0,
        max_latency: Duration::from_secs(10),
        hang: c.hang,
        budget: lincheck::Budget::default().with_time(c.check_time),
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.command {
        Cmd::Burn => {
            run::burn();
            return ExitCode::SUCCESS;
        }
        Cmd::Faults {
            common,
            duration,
            loops,
        } => config(Mode::Faults, common, duration, loops),
        Cmd::Busy {
            common,
            duration,
            loops,
            burners,
            max_latency,
        } => config(Mode::Busy, common, duration, loops).map(|c| Config {
            burners,
            max_latency,
            ..c
        }),
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("patronus-scenario: {e}");
            return ExitCode::from(2);
        }
    };
    match run::run(&config) {
        Ok(findings) if findings.passed(config.mode) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("patronus-scenario: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
    }
}

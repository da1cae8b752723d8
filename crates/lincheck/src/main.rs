//! `lincheck`: checks a JSON-lines history file for linearizability.
//!
//! Exit status: 0 linearizable, 1 not linearizable (the witness is printed), 2 undecided (the
//! budget ran out), 64 usage error, 65 malformed history (the message names the line), 66
//! unreadable input, 73 the witness file could not be written.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use lincheck::jsonl::{self, AnyHistory};
use lincheck::{Budget, Error, History, Model, Stats, Verdict};

/// Linearizability checker for recorded histories (docs/lincheck.md).
#[derive(Debug, Parser)]
#[command(name = "lincheck", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check one history file (JSON lines).
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The history: JSON lines, an optional header then one record per operation.
    file: PathBuf,
    /// The model, if the file has no header (or to insist on one).
    #[arg(long, value_enum)]
    model: Option<ModelArg>,
    /// Give up (exit 2) after exploring this many states (per phase: check, shrink).
    #[arg(long, default_value_t = Budget::default().max_states)]
    max_states: u64,
    /// Give up (exit 2) after this many seconds.
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Write the minimal witness of a violation to this file (JSON lines).
    #[arg(long)]
    witness_out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModelArg {
    Kv,
    Queue,
}

const USAGE: u8 = 64;
const DATA: u8 = 65;
const NO_INPUT: u8 = 66;
const CANT_CREATE: u8 = 73;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(USAGE);
        }
    };
    let Command::Check(args) = cli.command;
    let mut budget = Budget::states(args.max_states);
    if let Some(s) = args.max_seconds {
        match Duration::try_from_secs_f64(s) {
            Ok(d) => budget = budget.with_time(d),
            Err(_) => {
                eprintln!("lincheck: --max-seconds must be a non-negative number, not {s}");
                return ExitCode::from(USAGE);
            }
        }
    }
    let model = args.model.map(|m| match m {
        ModelArg::Kv => "kv",
        ModelArg::Queue => "queue",
    });
    let code = match jsonl::read_any(&args.file, model) {
        Ok(AnyHistory::Kv(h)) => run(&h, budget, &args),
        Ok(AnyHistory::Queue(h)) => run(&h, budget, &args),
        Err(e @ Error::Io { .. }) => {
            eprintln!("lincheck: {e}");
            NO_INPUT
        }
        Err(e) => {
            eprintln!("lincheck: {e}");
            DATA
        }
    };
    ExitCode::from(code)
}

fn summary(stats: &Stats) -> String {
    format!(
        "{} operations, {} partitions, {} states, {} shrink states, {:.3?}",
        stats.operations, stats.partitions, stats.states, stats.shrink_states, stats.elapsed
    )
}

fn run<M: Model>(history: &History<M>, budget: Budget, args: &CheckArgs) -> u8 {
    match M::check(history, budget) {
        Verdict::Linearizable(stats) => {
            println!("linearizable ({} model): {}", M::NAME, summary(&stats));
            0
        }
        Verdict::Violation(w) => {
            println!(
                "not linearizable ({} model): {}",
                M::NAME,
                summary(&w.stats)
            );
            println!("{w}");
            if let Some(path) = &args.witness_out {
                if let Err(e) = w.history.write_jsonl(path) {
                    eprintln!("lincheck: {e}");
                    return CANT_CREATE;
                }
                println!("witness written to {}", path.display());
            }
            1
        }
        Verdict::Undecided(stats) => {
            let report = Verdict::<M>::Undecided(stats)
                .into_result()
                .err()
                .map(|e| e.to_string());
            println!("{}", report.unwrap_or_default());
            2
        }
    }
}

//! `patronus faas`: one chain of ServerlessBench TC4 on the command line, in a container of
//! the FaaS runtime (`patronus-faas`), against a running `patronus serve` (`--connect`) or a
//! memory node embedded in this process. Prints each function's time and the permission
//! operations the chain made; frees what it put in remote memory before it exits.

use crate::serve::{TenantArg, parse_tenant};
use anyhow::{Context as _, Result, anyhow};
use clap::{Args, Subcommand};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_faas::apps::analysis::{self, Analysis, Employee};
use patronus_faas::apps::image as image_chain;
use patronus_faas::{ChainReport, FaasError, Invocation, Runtime};
use patronus_ods::PatronusMemory;
use rnic::soft::{SoftAddress, SoftConfig, SoftContext, SoftProvider, TcpNode};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

type Mem = PatronusMemory<SoftProvider>;

/// `patronus faas`'s arguments.
#[derive(Args, Debug)]
pub struct FaasArgs {
    /// A running memory node, HOST:PORT (default: one embedded in this process).
    #[arg(long, value_name = "ADDR")]
    connect: Option<SocketAddr>,
    /// Act as this tenant, ID:SECRET, with --connect (default: tenant 0).
    #[arg(long, value_parser = parse_tenant)]
    tenant: Option<TenantArg>,
    /// TLS to the node, with --connect.
    #[command(flatten)]
    tls: crate::tls::TlsArgs,
    #[command(subcommand)]
    command: FaasCommand,
}

#[derive(Subcommand, Debug)]
enum FaasCommand {
    /// Make a thumbnail: the image file goes to remote memory, the image chain runs, the
    /// thumbnail is read back and saved to --out (JPEG or PNG, by its extension).
    Image {
        /// The image (JPEG or PNG).
        #[arg(long)]
        input: PathBuf,
        /// Where to save the thumbnail.
        #[arg(long)]
        out: PathBuf,
        /// The thumbnail's longer side, at most.
        #[arg(long, default_value_t = image_chain::DEFAULT_SIDE, value_parser = clap::value_parser!(u32).range(1..=16384))]
        side: u32,
    },
    /// Load an employee table (in remote memory), add one employee with the data-analysis
    /// chain, and print its salary analysis.
    Analyse {
        /// Employees loaded first.
        #[arg(long, default_value_t = analysis::DEFAULT_RECORDS)]
        records: u32,
        /// The new employee's department (0 to 7).
        #[arg(long, default_value_t = 0)]
        department: u64,
        /// The new employee's salary.
        #[arg(long, default_value_t = 50_000)]
        salary: u64,
    },
}

/// Where the chain runs: an embedded node (kept alive here) or a running one.
struct Node {
    _embedded: Option<EmbeddedCluster>,
    device: SoftContext,
    address: SoftAddress,
    client: ClientConfig,
}

impl Node {
    fn open(args: &FaasArgs) -> Result<Node> {
        let mut client = ClientConfig::default();
        if let Some(t) = &args.tenant {
            client.tenant = t.tenant;
            client.tenant_secret = t.secret;
        }
        match args.connect {
            Some(addr) => Ok(Node {
                _embedded: None,
                device: TcpNode::open_with(
                    SoftConfig::default(),
                    SocketAddr::from(([0, 0, 0, 0], 0)),
                    args.tls.tcp()?,
                )
                .context("opening a TCP device")?,
                address: SoftAddress::Tcp(addr),
                client,
            }),
            None => {
                let node = NodeConfig {
                    max_lifetime_us: 10_000_000,
                    ..NodeConfig::default()
                };
                let c = EmbeddedCluster::start(
                    Link::InProc,
                    SoftConfig::default(),
                    node,
                    client.clone(),
                    1,
                )
                .context("starting an embedded memory node")?;
                Ok(Node {
                    device: c.client_ctxs[0].clone(),
                    address: c.node.address().clone(),
                    _embedded: Some(c),
                    client,
                })
            }
        }
    }

    fn memory(&self) -> Result<Mem> {
        Ok(PatronusMemory::new(
            Client::connect(&self.device, &self.address, self.client.clone())
                .with_context(|| format!("connecting to the memory node at {:?}", self.address))?,
        ))
    }

    /// Runs one invocation of `chain` in a container of its own; its report.
    fn run(&self, chain: patronus_faas::Chain<Mem>, inv: Invocation) -> Result<ChainReport> {
        let (device, address, client) = (
            self.device.clone(),
            self.address.clone(),
            self.client.clone(),
        );
        let name = chain.name;
        let mut rt = Runtime::start(1, vec![chain], Duration::from_secs(5), move |_| {
            Client::connect(&device, &address, client.clone())
                .map(PatronusMemory::new)
                .map_err(|e| FaasError::Stopped(e.to_string()))
        });
        rt.submit(name, inv)?;
        let done = rt
            .next_done(Duration::from_secs(60))
            .ok_or_else(|| anyhow!("the chain did not finish in 60 s"))?;
        Ok(done.report?)
    }
}

/// Runs `patronus faas`.
pub fn run(args: &FaasArgs) -> Result<()> {
    let node = Node::open(args)?;
    let mut mem = node.memory()?;
    match &args.command {
        FaasCommand::Image { input, out, side } => {
            let file =
                std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
            let photo = image_chain::upload(&mut mem, &file)?;
            let result = node.run(image_chain::chain(), image_chain::invocation(photo, *side));
            let _ = patronus_faas::free(&mut mem, photo);
            let report = result.with_context(|| format!("thumbnail of {}", input.display()))?;
            print_report(&report);
            let t = image_chain::Thumbnailed::decode(&report.result)
                .ok_or_else(|| anyhow!("the chain's response is malformed"))?;
            let png = image_chain::fetch(&mut mem, t.thumbnail);
            let _ = patronus_faas::free(&mut mem, t.thumbnail);
            let img = image::load_from_memory(&png?).context("decoding the thumbnail")?;
            img.save(out)
                .with_context(|| format!("saving the thumbnail to {}", out.display()))?;
            println!(
                "{} ({} × {}) → {} ({} × {})",
                input.display(),
                t.size.0,
                t.size.1,
                out.display(),
                t.thumbnail_size.0,
                t.thumbnail_size.1
            );
        }
        FaasCommand::Analyse {
            records,
            department,
            salary,
        } => {
            let loaded = analysis::employees(*records, 1, 7);
            let capacity = records.saturating_add(1);
            let table = analysis::create_table(&mut mem, capacity, &loaded).with_context(|| {
                format!(
                    "an employee table of {capacity} records ({} bytes, one object)",
                    analysis::table_bytes(capacity)
                )
            })?;
            let new = Employee {
                id: u64::from(*records) + 1,
                department: *department,
                salary: *salary,
            };
            let result = node.run(analysis::chain(), new.invocation(table));
            let _ = patronus_faas::free(&mut mem, table);
            let report = result.context("the data-analysis chain")?;
            print_report(&report);
            let a = Analysis::decode(&report.result)
                .ok_or_else(|| anyhow!("the chain's response is malformed"))?;
            for o in &report.outputs {
                let _ = patronus_faas::free(&mut mem, *o);
            }
            print_analysis(&a);
        }
    }
    Ok(())
}

fn print_report(r: &ChainReport) {
    for (name, took) in &r.functions {
        println!("  {name:<10} {:>10.3} ms", took.as_secs_f64() * 1e3);
    }
    println!(
        "  permissions: {} acquire, {} allocate, {} release, {} extension",
        r.acquires, r.allocates, r.releases, r.extends
    );
}

fn print_analysis(a: &Analysis) {
    println!("department  employees  average salary");
    for d in 0..analysis::DEPARTMENTS {
        match a.average(d) {
            Some(avg) => println!("{d:>10}  {:>9}  {avg:>14.2}", a.count[d]),
            None => println!("{d:>10}  {:>9}  {:>14}", 0, "-"),
        }
    }
    println!("{:>10}  {:>9}", "all", a.records());
}

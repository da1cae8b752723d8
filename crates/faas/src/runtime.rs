//! Warm containers and a dispatcher: `containers` worker threads, each connecting once to
//! remote memory and then running the chains it pulls from one shared queue, so the
//! containers stay busy as long as invocations wait. [`Runtime::start`] returns once every
//! container has connected (hot starts, §7.4: no connection set-up inside a measurement). Results come back on a channel, each
//! with the container that ran it and its latency from submission.

use crate::chain::{Chain, ChainReport, Invocation, run_chain};
use crate::error::FaasError;
use crossbeam_channel::{Receiver, Sender, unbounded};
use patronus_ods::RemoteMemory;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A finished invocation.
#[derive(Debug)]
pub struct Done {
    /// The id it was submitted with.
    pub id: u64,
    /// The container that ran it.
    pub container: usize,
    /// Submission to the end of its last function (queueing included).
    pub latency: Duration,
    /// What it did, or why it failed.
    pub report: Result<ChainReport, FaasError>,
}

struct Job {
    id: u64,
    chain: usize,
    invocation: Invocation,
    submitted: Instant,
}

/// Running containers (see the module docs).
#[derive(Debug)]
pub struct Runtime {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    names: Vec<&'static str>,
    containers: Vec<JoinHandle<()>>,
    next_id: u64,
}

impl Runtime {
    /// Starts `containers` containers running `chains`, and waits until each has its remote
    /// memory: container `i` gets it from `connect(i)` on its own thread (and keeps it: warm
    /// starts); a container that cannot connect answers every invocation it pulls with
    /// [`FaasError::Stopped`]. Rights a chain takes last `lease`.
    pub fn start<M, C>(
        containers: usize,
        chains: Vec<Chain<M>>,
        lease: Duration,
        connect: C,
    ) -> Runtime
    where
        M: RemoteMemory + 'static,
        C: Fn(usize) -> Result<M, FaasError> + Send + Sync + 'static,
    {
        let names = chains.iter().map(|c| c.name).collect();
        let chains = Arc::new(chains);
        let connect = Arc::new(connect);
        let (jobs, queue) = unbounded::<Job>();
        let (done_tx, done) = unbounded::<Done>();
        let (ready_tx, ready) = unbounded::<()>();
        let containers: Vec<JoinHandle<()>> = (0..containers.max(1))
            .map(|i| {
                let (queue, done_tx) = (queue.clone(), done_tx.clone());
                let (chains, connect, ready_tx) =
                    (chains.clone(), connect.clone(), ready_tx.clone());
                std::thread::Builder::new()
                    .name(format!("faas-container-{i}"))
                    .spawn(move || {
                        let mem = connect(i);
                        let _ = ready_tx.send(());
                        container(i, mem, &chains, lease, &queue, &done_tx)
                    })
                    .expect("spawning a container thread")
            })
            .collect();
        drop(ready_tx);
        // Blocks until every container connected or gave up (connecting is bounded by the
        // connection's own timeouts); a container that died early just closes its sender.
        for _ in 0..containers.len() {
            if ready.recv().is_err() {
                break;
            }
        }
        Runtime {
            jobs: Some(jobs),
            done,
            names,
            containers,
            next_id: 0,
        }
    }

    /// Queues an invocation of the chain called `chain`; returns its id.
    #[allow(clippy::disallowed_methods)] // a dispatcher's latency is wall time
    pub fn submit(&mut self, chain: &str, invocation: Invocation) -> Result<u64, FaasError> {
        let index = self
            .names
            .iter()
            .position(|n| *n == chain)
            .ok_or_else(|| FaasError::NoChain(chain.to_string()))?;
        self.next_id += 1;
        let job = Job {
            id: self.next_id,
            chain: index,
            invocation,
            submitted: Instant::now(),
        };
        self.jobs
            .as_ref()
            .and_then(|j| j.send(job).ok())
            .ok_or_else(|| FaasError::Stopped("the runtime is shut down".into()))?;
        Ok(self.next_id)
    }

    /// The next finished invocation, waiting (blocked, not spinning) up to `max`.
    pub fn next_done(&self, max: Duration) -> Option<Done> {
        self.done.recv_timeout(max).ok()
    }

    /// Stops taking invocations, lets the containers finish what is queued, and joins them.
    pub fn shutdown(mut self) -> Vec<Done> {
        self.jobs = None;
        for c in std::mem::take(&mut self.containers) {
            let _ = c.join();
        }
        self.done.try_iter().collect()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.jobs = None;
        for c in std::mem::take(&mut self.containers) {
            let _ = c.join();
        }
    }
}

fn container<M: RemoteMemory>(
    i: usize,
    mut mem: Result<M, FaasError>,
    chains: &[Chain<M>],
    lease: Duration,
    queue: &Receiver<Job>,
    done: &Sender<Done>,
) {
    for job in queue.iter() {
        let report = match (&mut mem, chains.get(job.chain)) {
            (Ok(m), Some(chain)) => run_chain(m, chain, &job.invocation, lease),
            (Err(e), _) => Err(FaasError::Stopped(format!("container {i}: {e}"))),
            (_, None) => Err(FaasError::NoChain(format!("#{}", job.chain))),
        };
        let _ = done.send(Done {
            id: job.id,
            container: i,
            latency: job.submitted.elapsed(),
            report,
        });
    }
}

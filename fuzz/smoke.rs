//! The driver of the stable fuzz smoke tests (`crates/*/tests/fuzz_smoke.rs` include this file
//! by path; the libFuzzer targets do not use it): the seed and iteration count, seeded
//! mutations of valid encodings, the replay of the libFuzzer corpus and artifacts, the seed
//! corpus, and what a failure prints so it can be reproduced. See `docs/fuzzing.md`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

/// Seed of every randomized smoke test unless `PATRONUS_FUZZ_SEED` says otherwise.
pub const DEFAULT_SEED: u64 = 0x5eed_0024;

/// Byte values that sit on the edges of the fields (flags, kinds, 24-bit tops, lengths).
const INTERESTING: [u8; 10] = [0x00, 0x01, 0x02, 0x7f, 0x80, 0x81, 0xfe, 0xff, 0x40, 0x41];

/// The seed and iteration count of one randomized test.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Seed of the test's RNG.
    pub seed: u64,
    /// Iterations of the test's loop.
    pub iters: u64,
}

impl Settings {
    /// `PATRONUS_FUZZ_SEED` and `PATRONUS_FUZZ_ITERS` (decimal or `0x` hex) if set, else the
    /// default seed and `default_iters`; printed, so a failure names what reproduces it.
    pub fn from_env(test: &str, default_iters: u64) -> Settings {
        let s = Settings {
            seed: env_u64("PATRONUS_FUZZ_SEED").unwrap_or(DEFAULT_SEED),
            iters: env_u64("PATRONUS_FUZZ_ITERS").unwrap_or(default_iters),
        };
        eprintln!(
            "{test}: seed {:#x}, {} iterations (reproduce with PATRONUS_FUZZ_SEED={:#x} \
             PATRONUS_FUZZ_ITERS={})",
            s.seed, s.iters, s.seed, s.iters
        );
        s
    }

    /// The test's RNG.
    pub fn rng(&self) -> StdRng {
        StdRng::seed_from_u64(self.seed)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v}: not a number: {e}")))
}

/// Inputs tried and inputs that decoded; printed when dropped, so also when a check fails.
#[derive(Debug)]
pub struct Stats {
    test: &'static str,
    seed: Option<u64>,
    /// Inputs tried.
    pub tried: u64,
    /// Inputs that decoded (at least one message of them).
    pub decoded: u64,
}

impl Stats {
    /// No input yet; `seed` of the inputs, if they are random.
    pub fn new(test: &'static str, seed: Option<u64>) -> Stats {
        Stats {
            test,
            seed,
            tried: 0,
            decoded: 0,
        }
    }

    /// Counts one input.
    pub fn record(&mut self, decoded: bool) {
        self.tried += 1;
        self.decoded += u64::from(decoded);
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        let seed = self
            .seed
            .map_or_else(String::new, |s| format!(" (seed {s:#x})"));
        eprintln!(
            "{}: {} inputs tried, {} decoded{seed}",
            self.test, self.tried, self.decoded
        );
    }
}

/// Where an input came from.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    /// Iteration `iteration` of a randomized test run with `seed`.
    Random {
        /// The test.
        test: &'static str,
        /// Its seed.
        seed: u64,
        /// The iteration.
        iteration: u64,
    },
    /// A file of the corpus or the artifacts.
    File(&'a Path),
}

/// Held while an input is checked: if the check panics, prints where the input came from and
/// its bytes, and writes them to a file that can be copied into the corpus (`docs/fuzzing.md`).
#[derive(Debug)]
pub struct Replay<'a> {
    origin: Origin<'a>,
    input: &'a [u8],
}

impl<'a> Replay<'a> {
    /// Guards the check of `input`.
    pub fn new(origin: Origin<'a>, input: &'a [u8]) -> Replay<'a> {
        Replay { origin, input }
    }
}

impl Drop for Replay<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        match self.origin {
            Origin::Random {
                test,
                seed,
                iteration,
            } => {
                let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz_smoke");
                let file = dir.join(format!("{test}-{seed:x}-{iteration}"));
                let saved = std::fs::create_dir_all(&dir)
                    .and_then(|()| std::fs::write(&file, self.input))
                    .map_or_else(
                        |e| format!("not saved: {e}"),
                        |()| file.display().to_string(),
                    );
                eprintln!(
                    "{test}: iteration {iteration} of seed {seed:#x} failed on {} bytes ({saved}): \
                     {:02x?}",
                    self.input.len(),
                    self.input
                );
            }
            Origin::File(path) => eprintln!("replay of {} failed", path.display()),
        }
    }
}

/// Applies one to four random edits to `bytes`: bit flips, byte overwrites (random or
/// edge values), small additions (length fields), insertions, removals, truncation.
pub fn mutate(rng: &mut StdRng, bytes: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..=4) {
        let len = bytes.len();
        let at = rng.random_range(0..=len);
        match (rng.random_range(0..7), bytes.get_mut(at)) {
            (0, Some(b)) => *b ^= 1 << rng.random_range(0..8),
            (1, Some(b)) => *b = rng.random(),
            (2, Some(b)) => *b = INTERESTING[rng.random_range(0..INTERESTING.len())],
            (3, Some(b)) => {
                let delta = rng.random_range(1..=16);
                *b = if rng.random() {
                    b.wrapping_add(delta)
                } else {
                    b.wrapping_sub(delta)
                };
            }
            (4, _) => bytes.insert(at, rng.random()),
            (5, Some(_)) => {
                bytes.remove(at);
            }
            (6, _) => bytes.truncate(at),
            _ => {}
        }
    }
}

/// The fuzz directory of the workspace (`fuzz/`), found from the crate's manifest.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every file of `fuzz/corpus/<target>/` and `fuzz/artifacts/<target>/` (those that exist),
/// in a fixed order.
pub fn corpus_files(target: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("read the corpus directory").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Checks that `fuzz/corpus/<target>/seed-<name>` holds `bytes` (the seed corpus is generated
/// by the smoke tests and committed); with `PATRONUS_FUZZ_WRITE_SEEDS=1`, writes it instead.
pub fn seed_file(target: &str, name: &str, bytes: &[u8]) {
    let dir = fuzz_dir().join("corpus").join(target);
    let path = dir.join(format!("seed-{name}"));
    if std::env::var_os("PATRONUS_FUZZ_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        std::fs::write(&path, bytes).expect("write a seed");
        return;
    }
    let on_disk = std::fs::read(&path).unwrap_or_default();
    assert!(
        on_disk == bytes,
        "{} is not the current encoding of seed {name}: regenerate the seed corpus with \
         PATRONUS_FUZZ_WRITE_SEEDS=1 (docs/fuzzing.md)",
        path.display()
    );
}

/// Replays every file of the target's corpus and artifacts through `check` (true: the input
/// decoded), and asserts that at least `seeds` of them decoded: the committed seed corpus is
/// there and still decodes.
pub fn replay_corpus(target: &str, seeds: usize, check: impl Fn(&[u8]) -> bool) {
    let files = corpus_files(target);
    let mut stats = Stats::new("corpus_and_artifacts_replay", None);
    for path in &files {
        let bytes = std::fs::read(path).expect("read a corpus file");
        let _replay = Replay::new(Origin::File(path), &bytes);
        stats.record(check(&bytes));
    }
    assert!(
        stats.decoded >= seeds as u64,
        "the seed corpus of fuzz/corpus/{target}/ is missing ({} files)",
        files.len()
    );
}

//! `ptovm`: assemble, disassemble, verify and inspect PTOW workload bytecode, expand it, and run
//! it on the threaded simulator.
//!
//! Every failure exits with the code of its kind ([`Exit`]), prints one line starting with
//! `error:` (text errors add the source line and a caret), writes nothing to standard output and
//! leaves no file behind.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use ptovm_assembler::{assemble, disassemble, Options, Overrides, Select};
use ptovm_vm::WindowMode;

mod bench;
mod budget;
mod expand;
mod inspect;
mod metg;
mod model;
mod report;
mod run;
mod sweep;

/// The bundled LLaMA-7B layer, run by `ptovm run` without a file.
const LLAMA: &str = include_str!("../examples/llama_layer.pto");

#[derive(Parser)]
#[command(
    name = "ptovm",
    version,
    about = "PTOW workload bytecode: assemble, disassemble, verify, inspect, expand, run",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// `--cores`: which cores an AICPU hands tasks to (spec/runtime.md §4.6).
#[derive(Clone, Copy, ValueEnum)]
enum Cores {
    /// Every AICPU shares every core: its home share first, then idle AICPUs' cores.
    Shared,
    /// Its own: core `c` of a pool belongs to AICPU `c mod n`.
    Partition,
}

impl Cores {
    fn alloc(self) -> ptovm_host_sim::sim::CoreAlloc {
        match self {
            Cores::Shared => ptovm_host_sim::sim::CoreAlloc::Shared,
            Cores::Partition => ptovm_host_sim::sim::CoreAlloc::Partition,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Deps {
    /// Only equal regions depend on each other (pto-isa TensorMap).
    Exact,
    /// Regions that share an element depend on each other.
    Overlap,
}

impl Deps {
    fn mode(self) -> ptovm_host_sim::DepMode {
        match self {
            Deps::Exact => ptovm_host_sim::DepMode::Exact,
            Deps::Overlap => ptovm_host_sim::DepMode::Overlap,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Stall,
    Abort,
    Benchmark,
}

#[derive(Subcommand)]
enum Cmd {
    /// Assemble a `.pto` module (or a disassembly listing) into PTOW bytecode.
    Asm {
        /// Input text; `-` reads standard input.
        input: PathBuf,
        /// Output file; `-` writes standard output. Default: the input with extension `.ptow`.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Workload to assemble (default: the first).
        #[arg(long)]
        workload: Option<String>,
        /// Schedule to use (default: the first for the workload).
        #[arg(long)]
        schedule: Option<String>,
        /// Override the AICPU count.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
        aicpus: Option<u16>,
        /// Override the task window size.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        window: Option<u32>,
        /// Override the window overflow mode.
        #[arg(long, value_enum)]
        window_mode: Option<Mode>,
        /// Override the stream count (with `stream_by`, the key is taken modulo the new count).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        streams: Option<u16>,
        /// Override the schedule's dispatch policy, in `.pto` syntax (`affinity(t)`,
        /// `hash(b)`, `static(i)`, ...; module text only).
        #[arg(long, value_name = "POLICY")]
        dispatch: Option<String>,
        /// Do not print warnings.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Print PTOW bytecode as listing text (which `asm` turns back into identical bytes).
    Disasm {
        /// Input bytecode; `-` reads standard input.
        input: PathBuf,
        /// Output file; default standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Verify PTOW bytecode: prints `ok`, or the error and exits 6 (damaged file) or 7 (invalid
    /// program).
    Verify {
        /// Input bytecode; `-` reads standard input.
        input: PathBuf,
    },
    /// Run a program on the threaded simulator: AICPUs generating and scheduling their own tasks,
    /// cube and vector AICores executing them. Without FILE: the bundled LLaMA-7B layer.
    Run {
        /// Input: `.pto` text or PTOW bytecode; default: the bundled LLaMA layer (N = 256 tiles).
        input: Option<PathBuf>,
        /// AICPU count (default: the program's schedule).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
        aicpus: Option<u32>,
        /// Cube cores in all (default: 24, or the machine's with `--model`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
        cube: Option<u32>,
        /// Vector cores in all (default: 48, or the machine's with `--model`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
        vector: Option<u32>,
        /// Which cores an AICPU hands tasks to: `shared` (its home share of each pool, then the
        /// cores of AICPUs with nothing ready; the default) or its own of a fixed `partition`.
        #[arg(long, value_enum)]
        cores: Option<Cores>,
        /// Task window per AICPU (default: the program's schedule).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
        window: Option<u32>,
        /// What a full window does (default: the program's schedule).
        #[arg(long, value_enum)]
        window_mode: Option<Mode>,
        /// A runtime parameter, as for `expand`. Repeat for each.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// Simulated time (spec/runtime.md §9): step the same scheduler in virtual time on a
        /// model of the machine, kernels taking their modelled durations, and report the
        /// makespan, utilization, critical path and idle time by cause instead of host speed.
        /// Deterministic: the same inputs give the same output, byte for byte.
        #[arg(long)]
        model: bool,
        /// With `--model`: the machine (a TOML file; default an Ascend 910B: 6 AICPUs, 24 cube
        /// and 48 vector cores, spec/runtime.md §9.1). Implies `--model`.
        #[arg(long, value_name = "FILE")]
        machine: Option<PathBuf>,
        /// With `--model`: kernel durations measured on hardware, overriding the module's (a
        /// TOML file, spec/pto.md §4.8). Implies `--model`.
        #[arg(long, value_name = "FILE")]
        costs: Option<PathBuf>,
        /// With `--model`: write an HTML report (utilization over time, per core and per
        /// AICPU) that a browser opens from the file. Implies `--model`.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Verify the run against the reference expander: every task once, on its pool, after
        /// all its predecessors.
        #[arg(long)]
        check: bool,
        /// Print one JSON object instead of the summary.
        #[arg(long)]
        json: bool,
        /// Write a Chrome trace-event file (open it in Perfetto): a track per AICPU and per core.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Measure the dependency latency: for every task that waited for a predecessor, the
        /// time from the end of its last predecessor (the reference graph's) to its own start,
        /// within one AICPU and across AICPUs (median, 90th and 99th percentile, largest). The
        /// cores time every task, which costs two clock reads a task.
        #[arg(long)]
        latency: bool,
        /// When AICPUs start dispatching: `immediate`, `after_orchestration` or `threshold:N`
        /// (default: the program's schedule).
        #[arg(long, value_parser = parse_start)]
        start: Option<ptovm_host_sim::sim::Start>,
        /// How the schedulers' TensorMap matches regions: `overlap` (every dependency) or
        /// `exact` (pto-isa's: equal regions only, so `--check` may catch a missed edge).
        #[arg(long, value_enum, default_value = "overlap")]
        deps: Deps,
        /// Refuse, before running, a program that generates more tasks than this (or can start
        /// more than 8 loop iterations a task of it).
        #[arg(long, default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        max_tasks: u64,
        /// Compute: give every tensor memory, fill the inputs from this seed, run real kernels
        /// (spec/kernels.md), and check the outputs against the same kernels run in program
        /// order (bit for bit) and against the workload's model (within a tolerance).
        #[arg(long, value_name = "SEED")]
        data: Option<u64>,
        /// With `--data`: write every tensor the workload writes to DIR/NAME.npy (created if
        /// missing) once the checks pass.
        #[arg(long, value_name = "DIR", requires = "data")]
        save: Option<PathBuf>,
        /// Bytes of each AICPU's workspace arena, which running tasks' scratch is allocated
        /// from (default: the program's `workspace`, or room for its largest workspace on
        /// every core); a task whose scratch does not fit waits for running ones to complete.
        #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..))]
        workspace: Option<u32>,
    },
    /// Measure a program (default: the bundled LLaMA layer, N = 256): generation alone and
    /// generation plus complete dependency building on one instance, the threaded run as `run`
    /// does it, and that run writing task descriptors, each once a round; prints the fastest,
    /// median and slowest round.
    Bench {
        /// Input: `.pto` text or PTOW bytecode; default: the bundled LLaMA layer (N = 256 tiles).
        input: Option<PathBuf>,
        /// A runtime parameter, as for `expand`. Repeat for each.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// Rounds; each takes the four measurements one after another.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
        runs: u32,
        /// Print one JSON object (every round's figures) instead of the summary.
        #[arg(long)]
        json: bool,
        /// Refuse, before running, a program that generates more tasks than this (or can start
        /// more than 8 loop iterations a task of it).
        #[arg(long, default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        max_tasks: u64,
    },
    /// Task Bench's METG(50 %): run a program with every kernel busy-waiting a duration, from
    /// --longest-ns down by halves, and give each run's efficiency (the kernels' time over the
    /// driver threads') and task granularity (the threads' time per task), and the granularity
    /// at which the efficiency crosses 50 %.
    Metg {
        /// Input: `.pto` text or PTOW bytecode; default: the bundled LLaMA layer (N = 256 tiles).
        input: Option<PathBuf>,
        /// A runtime parameter, as for `expand`. Repeat for each.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// AICPU count (default: the program's schedule).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
        aicpus: Option<u32>,
        /// Task window per AICPU (default: the program's schedule).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65_536))]
        window: Option<u32>,
        /// The first (longest) kernel duration, in nanoseconds.
        #[arg(long, default_value_t = 64_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        longest_ns: u64,
        /// Stop halving below this duration, in nanoseconds (the sweep also stops once a run's
        /// efficiency falls below 25 %).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        shortest_ns: u64,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Refuse, before running, a program that generates more tasks than this (or can start
        /// more than 8 loop iterations a task of it).
        #[arg(long, default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        max_tasks: u64,
    },
    /// Model one workload (simulated time, as `run --model`) under every combination of the
    /// schedule knobs given, and print their makespan and utilization, best first, so a
    /// schedule can be picked by what it would cost on the NPU.
    Sweep {
        /// Input: `.pto` text or PTOW bytecode; default: the bundled LLaMA layer (N = 256 tiles).
        input: Option<PathBuf>,
        /// A runtime parameter, as for `expand`. Repeat for each.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// A knob and its values: dispatch=round_robin,affinity(t) (`.pto` input),
        /// aicpus=1,2,6, cores=shared,partition, window=64,1024,
        /// start=immediate,after_orchestration,threshold:N, pipeline_depth=0,2,
        /// stealing=off,on, batch_deps=0,8. Repeat for each knob; every combination runs (at
        /// most 4,096).
        #[arg(long = "vary", value_name = "KNOB=V1,V2,...")]
        vary: Vec<String>,
        /// The machine (a TOML file; default an Ascend 910B).
        #[arg(long, value_name = "FILE")]
        machine: Option<PathBuf>,
        /// Kernel durations measured on hardware (a TOML file).
        #[arg(long, value_name = "FILE")]
        costs: Option<PathBuf>,
        /// Also write the points as CSV, in sweep order.
        #[arg(long, value_name = "FILE")]
        csv: Option<PathBuf>,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Refuse, before running, a program that generates more tasks than this.
        #[arg(long, default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        max_tasks: u64,
    },
    /// Expand a program into tasks on each AICPU, check them against the reference expander,
    /// and list them with their dependencies.
    Expand {
        /// Input: `.pto` text (assembled in memory) or PTOW bytecode; `-` reads standard input.
        input: PathBuf,
        /// AICPU count (default: the program's schedule).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
        aicpus: Option<u32>,
        /// List only this AICPU's tasks.
        #[arg(long)]
        aicpu: Option<u32>,
        /// A runtime parameter: `NAME=N` for a scalar, `NAME=1,2,3` for an array. Repeat for each.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// How regions are matched for dependencies.
        #[arg(long, value_enum, default_value = "overlap")]
        deps: Deps,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Same as `--format json`.
        #[arg(long)]
        json: bool,
        /// List at most this many tasks.
        #[arg(long)]
        limit: Option<usize>,
        /// Print only the totals (no task or edge lists).
        #[arg(long)]
        summary: bool,
    },
    /// Show the header, sections, configuration and tables of PTOW bytecode.
    Inspect {
        /// Input bytecode (or `.pto` text, assembled in memory); `-` reads standard input.
        input: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The exit code of each kind of failure (0 is success). README.md and `ptovm --help` list them;
/// `tests/cli/hostile.rs` checks each input kind against its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// A verified program with valid parameters failed while it ran: an expression error (an
    /// index outside a runtime array, overflow, division by zero, a region outside its tensor),
    /// a full window in `abort` mode, or more tasks than `expand` holds.
    Failed = 1,
    /// Bad command-line usage: unknown command or option, a value out of range (`--window 0`,
    /// `--aicpu` not below the AICPU count, too few cores for the AICPUs).
    Usage = 2,
    /// A file or stream could not be read or written.
    Io = 3,
    /// An internal consistency check failed (a bug: please report it).
    Internal = 4,
    /// `.pto` text or a listing was rejected by the assembler (or is not UTF-8).
    Text = 5,
    /// The bytecode file is damaged or foreign: too short, bad magic, unknown version, a length
    /// or section sizes that disagree, a bad checksum (usually a broken transfer).
    Damaged = 6,
    /// The bytecode is well framed but its program breaks a rule of the verifier (unknown
    /// opcode, an index outside a table, a body past the end, nesting too deep, ...).
    Invalid = 7,
    /// The runtime parameters were rejected: missing, unknown, given twice, not a number, of
    /// the wrong kind or length, a sparse indptr that is empty, decreasing or past its
    /// indices, or a ragged or sparse `outer` count past its array.
    Params = 8,
}

/// The exit-code table shown by `ptovm --help`.
const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the program failed while running (runtime error, full window in abort mode)
  2  bad command-line usage
  3  I/O error (cannot read the input or write the output)
  4  internal error (a bug: please report it)
  5  the .pto text or listing was rejected
  6  the bytecode file is damaged or not PTOW (size, magic, version, length, checksum)
  7  the bytecode's program was rejected by the verifier
  8  the runtime parameters were rejected";

/// A failure: its kind and the message (one line, or a text error with its caret).
pub(crate) struct Fail(pub(crate) Exit, pub(crate) String);

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Fail> {
    if path.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::stdin()
            .read_to_end(&mut v)
            .map_err(|e| Fail(Exit::Io, format!("error: cannot read standard input: {e}")))?;
        return Ok(v);
    }
    std::fs::read(path).map_err(|e| {
        Fail(
            Exit::Io,
            format!("error: cannot read {}: {e}", path.display()),
        )
    })
}

fn text(path: &Path, bytes: Vec<u8>) -> Result<String, Fail> {
    String::from_utf8(bytes).map_err(|e| {
        Fail(
            Exit::Text,
            format!(
                "error: {} is not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Writes `data` to `path` atomically (temporary file in the same directory, then rename), or
/// to standard output for `-`.
pub(crate) fn write_out(path: &Path, data: &[u8]) -> Result<(), Fail> {
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        return out.write_all(data).and_then(|_| out.flush()).map_err(|e| {
            Fail(
                Exit::Io,
                format!("error: cannot write standard output: {e}"),
            )
        });
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let fail = |e: std::io::Error| {
        Fail(
            Exit::Io,
            format!("error: cannot write {}: {e}", path.display()),
        )
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".ptovm-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(fail)?;
    tmp.write_all(data)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(fail)?;
    // A temporary file is private (0600); give the output the permissions of the file it
    // replaces, or the usual 0644 for a new one.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644);
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))
            .map_err(fail)?;
    }
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

pub(crate) fn parse_start(s: &str) -> Result<ptovm_host_sim::sim::Start, String> {
    use ptovm_host_sim::sim::Start;
    match s {
        "immediate" => Ok(Start::Immediate),
        "after_orchestration" | "after-orchestration" => Ok(Start::AfterOrchestration),
        _ => match s
            .strip_prefix("threshold:")
            .or_else(|| s.strip_prefix("threshold="))
        {
            Some(n) => n
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(Start::Threshold)
                .ok_or_else(|| format!("{n:?} is not a task count (at least 1)")),
            None => Err("expected immediate, after_orchestration or threshold:N".to_string()),
        },
    }
}

fn is_ptow(bytes: &[u8]) -> bool {
    bytes.starts_with(&ptovm_vm::MAGIC.to_le_bytes())
}

/// Loads `input` (`.pto` text or bytecode) or, without one, the bundled LLaMA layer (its
/// default is `N = 256`); verifies it, parses `params` against it (repeats of one
/// setting dropped) and calls `f` with the program, its module and the parameter values.
fn with_program<T>(
    input: Option<&Path>,
    mut params: Vec<String>,
    f: impl FnOnce(
        &ptovm_vm::Verified<'_>,
        &ptovm_assembler::Module,
        &[ptovm_vm::Value<'_>],
    ) -> Result<T, Fail>,
) -> Result<T, Fail> {
    let (loaded, name) = match input {
        Some(path) => (load_bytecode(path)?, path.display().to_string()),
        None => {
            let out = assemble("examples/llama_layer.pto", LLAMA, &Options::default())
                .map_err(|e| Fail(Exit::Internal, format!("internal error: {e}")))?;
            (
                Loaded {
                    bytes: out.bytes,
                    warnings: vec![],
                },
                "examples/llama_layer.pto".to_string(),
            )
        }
    };
    params.dedup();
    let v = ptovm_vm::verify(&loaded.bytes).map_err(|e| verify_err(Path::new(&name), e))?;
    let m = ptovm_assembler::Module::decode(&v);
    let owned =
        expand::parse_params(&m, &params).map_err(|e| Fail(Exit::Params, format!("error: {e}")))?;
    let out = f(&v, &m, &expand::values(&owned))?;
    loaded.warn();
    Ok(out)
}

/// A program as read: its bytecode, and the assembler's warnings when it was text.
struct Loaded {
    bytes: Vec<u8>,
    warnings: Vec<String>,
}

impl Loaded {
    /// Prints the warnings — after the command succeeded, so that a failing command's first
    /// line on stderr is its error.
    fn warn(&self) {
        for w in &self.warnings {
            eprintln!("{w}");
        }
    }
}

/// Reads bytecode, or assembles text in memory when the input is not PTOW.
fn load_bytecode(path: &Path) -> Result<Loaded, Fail> {
    let bytes = read(path)?;
    if is_ptow(&bytes) || bytes.is_empty() || std::str::from_utf8(&bytes).is_err() {
        return Ok(Loaded {
            bytes,
            warnings: vec![],
        });
    }
    let src = text(path, bytes)?;
    let out = assemble(&path.display().to_string(), &src, &Options::default())
        .map_err(|e| Fail(Exit::Text, e.to_string()))?;
    Ok(Loaded {
        bytes: out.bytes,
        warnings: out.warnings.iter().map(|w| w.to_string()).collect(),
    })
}

/// A runtime error of a verified program.
pub(crate) fn run_err(e: ptovm_vm::RunError) -> Fail {
    Fail(Exit::Failed, format!("error: {e}"))
}

/// An interpreter that could not start: its parameters, or its launch-time evaluation.
pub(crate) fn launch_err(e: ptovm_vm::LaunchError) -> Fail {
    match e {
        ptovm_vm::LaunchError::Params(e) => {
            Fail(Exit::Params, format!("error: runtime parameters: {e}"))
        }
        ptovm_vm::LaunchError::Run(e) => run_err(e),
    }
}

fn verify_err(path: &Path, e: ptovm_vm::VerifyError) -> Fail {
    let kind = if e.is_framing() {
        Exit::Damaged
    } else {
        Exit::Invalid
    };
    Fail(kind, format!("error: {}: {e}", path.display()))
}

fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Asm {
            input,
            output,
            workload,
            schedule,
            aicpus,
            window,
            window_mode,
            streams,
            dispatch,
            quiet,
        } => {
            let src = text(&input, read(&input)?)?;
            let opts = Options {
                select: Select { workload, schedule },
                overrides: Overrides {
                    aicpus,
                    window,
                    window_mode: window_mode.map(|m| match m {
                        Mode::Stall => WindowMode::Stall,
                        Mode::Abort => WindowMode::Abort,
                        Mode::Benchmark => WindowMode::Benchmark,
                    }),
                    streams,
                    dispatch,
                },
            };
            let name = input.display().to_string();
            let out = assemble(&name, &src, &opts).map_err(|e| Fail(Exit::Text, e.to_string()))?;
            if !quiet {
                for w in &out.warnings {
                    eprintln!("{w}");
                }
            }
            let dest = output.unwrap_or_else(|| {
                if input.as_os_str() == "-" {
                    PathBuf::from("-")
                } else {
                    input.with_extension("ptow")
                }
            });
            write_out(&dest, &out.bytes)
        }
        Cmd::Disasm { input, output } => {
            let bytes = read(&input)?;
            let text = disassemble(&bytes).map_err(|e| verify_err(&input, e))?;
            write_out(output.as_deref().unwrap_or(Path::new("-")), text.as_bytes())
        }
        Cmd::Verify { input } => {
            let bytes = read(&input)?;
            ptovm_vm::verify(&bytes).map_err(|e| verify_err(&input, e))?;
            println!("ok");
            Ok(())
        }
        Cmd::Run {
            input,
            aicpus,
            cube,
            cores,
            vector,
            window,
            window_mode,
            params,
            check,
            json,
            trace,
            latency,
            start,
            deps,
            max_tasks,
            data,
            save,
            workspace,
            model,
            machine,
            costs,
            report,
        } => {
            let modelled = model || machine.is_some() || costs.is_some() || report.is_some();
            if modelled && data.is_some() {
                return Err(Fail(
                    Exit::Usage,
                    "error: --data computes on the threaded run; it cannot be combined with --model (simulated time)".into(),
                ));
            }
            if modelled && latency {
                return Err(Fail(
                    Exit::Usage,
                    "error: --latency times the threaded run; with --model (simulated time) the critical path and idle time are in the report".into(),
                ));
            }
            let args = run::RunArgs {
                aicpus,
                cube,
                vector,
                cores: cores.map(Cores::alloc),
                window,
                mode: window_mode.map(|m| match m {
                    Mode::Stall => WindowMode::Stall,
                    Mode::Abort => WindowMode::Abort,
                    Mode::Benchmark => WindowMode::Benchmark,
                }),
                check,
                json,
                trace,
                latency,
                start,
                deps: deps.mode(),
                max_tasks,
                data: data.map(|seed| run::Data { seed, save }),
                workspace,
                model: modelled.then_some(model::ModelArgs {
                    machine,
                    costs,
                    report,
                }),
            };
            let out = with_program(input.as_deref(), params, |v, m, vals| {
                run::run(v, m, vals, &args)
            })?;
            write_out(Path::new("-"), out.as_bytes())
        }
        Cmd::Bench {
            input,
            params,
            runs,
            json,
            max_tasks,
        } => {
            let out = with_program(input.as_deref(), params, |v, m, vals| {
                bench::bench(v, m, vals, runs, json, max_tasks)
            })?;
            write_out(Path::new("-"), out.as_bytes())
        }
        Cmd::Sweep {
            input,
            params,
            vary,
            machine,
            costs,
            csv,
            json,
            max_tasks,
        } => {
            let source = sweep::source_of(input.as_deref(), LLAMA)?;
            let bytes = match (&input, &source) {
                (Some(path), _) => load_bytecode(path)?.bytes,
                (None, Some((name, src))) => {
                    assemble(name, src, &Options::default())
                        .map_err(|e| Fail(Exit::Internal, format!("internal error: {e}")))?
                        .bytes
                }
                (None, None) => vec![],
            };
            if let Some(path) = &input {
                ptovm_vm::verify(&bytes).map_err(|e| verify_err(path, e))?;
            }
            let ask = sweep::Ask {
                source,
                bytes,
                params,
                vary,
                model: model::ModelArgs {
                    machine,
                    costs,
                    report: None,
                },
                csv,
                json,
                max_tasks,
            };
            let out = sweep::sweep(&ask)?;
            write_out(Path::new("-"), out.as_bytes())
        }
        Cmd::Metg {
            input,
            params,
            aicpus,
            window,
            longest_ns,
            shortest_ns,
            json,
            max_tasks,
        } => {
            let ask = metg::Ask {
                aicpus,
                window,
                longest_ns,
                shortest_ns,
                max_tasks,
                json,
            };
            let out = with_program(input.as_deref(), params, |v, m, vals| {
                metg::metg(v, m, vals, ask)
            })?;
            write_out(Path::new("-"), out.as_bytes())
        }
        Cmd::Expand {
            input,
            aicpus,
            aicpu,
            params,
            deps,
            format,
            json,
            limit,
            summary,
        } => {
            let loaded = load_bytecode(&input)?;
            let v = ptovm_vm::verify(&loaded.bytes).map_err(|e| verify_err(&input, e))?;
            let m = ptovm_assembler::Module::decode(&v);
            let owned = expand::parse_params(&m, &params)
                .map_err(|e| Fail(Exit::Params, format!("error: {e}")))?;
            let vals = expand::values(&owned);
            let opts = expand::Opts {
                aicpus,
                aicpu,
                deps: deps.mode(),
                json: json || matches!(format, Format::Json),
                limit,
                summary,
            };
            let out = expand::run(&v, &m, &vals, &opts)?;
            write_out(Path::new("-"), out.as_bytes())?;
            loaded.warn();
            Ok(())
        }
        Cmd::Inspect { input, json } => {
            let loaded = load_bytecode(&input)?;
            let v = ptovm_vm::verify(&loaded.bytes).map_err(|e| verify_err(&input, e))?;
            let out = if json {
                inspect::json(&v) + "\n"
            } else {
                inspect::text(&v)
            };
            write_out(Path::new("-"), out.as_bytes())?;
            loaded.warn();
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("{msg}");
            ExitCode::from(code as u8)
        }
    }
}

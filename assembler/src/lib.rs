//! # ptovm-assembler
//!
//! The host compiler for PTOW bytecode:
//! - the `.pto` workload-schedule module language (spec/pto.md), parsed with `nom` tokens and a
//!   recursive-descent parser, checked and lowered to a [`Module`];
//! - the listing format (spec/bytecode.md §9), which the disassembler prints and the assembler
//!   reads back into identical bytes;
//! - the encoder and decoder between [`Module`] and bytes.
//!
//! Nothing here panics on any input text: every problem is an [`AsmError`] with file, line,
//! column and a caret.
//!
//! ```
//! let src = "@workload w(%n: dense[4]) { parallel_for i in %n { task @k(i) resources(A[i]) } }";
//! let out = ptovm_assembler::assemble("w.pto", src, &Default::default()).unwrap();
//! assert!(ptovm_vm::verify(&out.bytes).is_ok());
//! let text = ptovm_assembler::disassemble(&out.bytes).unwrap();
//! let again = ptovm_assembler::assemble("any-name.txt", &text, &Default::default()).unwrap();
//! assert_eq!(out.bytes, again.bytes);
//! ```

pub mod ast;
pub mod diag;
pub mod lexer;
pub mod listing;
pub mod lower;
pub mod model;

pub use diag::{AsmError, DiagKind, Diagnostic, Severity, Span};
pub use lower::Select;
pub use model::Module;

use ptovm_vm::{limits, Section, VerifyError, WindowMode};
use zerocopy::little_endian::{U16, U32};

/// Settings that override the module's `@schedule` (the CLI's `--aicpus`, `--window`, ...).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// AICPU count.
    pub aicpus: Option<u16>,
    /// Task window size.
    pub window: Option<u32>,
    /// Window overflow mode.
    pub window_mode: Option<WindowMode>,
    /// Streams.
    pub streams: Option<u16>,
    /// A dispatch policy in `.pto` syntax (`affinity(t)`) that replaces the selected schedule's
    /// `dispatch` (module text only).
    pub dispatch: Option<String>,
}

/// Assembly options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Which workload and schedule (module text only).
    pub select: Select,
    /// Schedule overrides.
    pub overrides: Overrides,
}

/// The result of assembling.
#[derive(Clone, Debug)]
pub struct Output {
    /// Verified PTOW bytes.
    pub bytes: Vec<u8>,
    /// The module they encode.
    pub module: Module,
    /// Warnings (undeclared kernels and tensors, unknown knobs).
    pub warnings: Vec<Diagnostic>,
    /// Whether the input was listing text (a disassembly) rather than a module.
    pub from_listing: bool,
}

/// Assembles `.pto` module text or listing text (recognised by its first directive `.ptow`,
/// whatever the file is called) into verified PTOW bytes.
pub fn assemble(file: &str, src: &str, opts: &Options) -> Result<Output, AsmError> {
    if let Some(policy) = &opts.overrides.dispatch {
        let spliced = with_dispatch(file, src, &opts.select, policy)?;
        let mut rest = opts.clone();
        rest.overrides.dispatch = None;
        return assemble(file, &spliced, &rest);
    }
    let mut rep = diag::Reporter::new(file, src);
    let from_listing = listing::is_listing(src);
    let o = &opts.overrides;
    let start = Span::new(0, 0);
    if o.streams == Some(0) {
        return Err(rep.error(DiagKind::Overflow, start, "--streams must be at least 1"));
    }
    let (mut module, spans) = if from_listing {
        let (m, s) = listing::parse(&rep, src)?;
        (m, Some(s))
    } else {
        let ast = ast::parse(&rep)?;
        (lower::lower(&mut rep, &ast, &opts.select, o.streams)?, None)
    };
    if let Some(n) = o.aicpus {
        if n == 0 || n > limits::MAX_AICPUS {
            return Err(rep.error(
                DiagKind::Overflow,
                start,
                format!("--aicpus {n} is outside 1..={}", limits::MAX_AICPUS),
            ));
        }
        module.config.num_aicpus = U16::new(n);
    }
    if let Some(w) = o.window {
        if w == 0 {
            return Err(rep.error(DiagKind::Overflow, start, "--window must be at least 1"));
        }
        module.config.window = U32::new(w);
    }
    if let Some(m) = o.window_mode {
        module.config.window_mode = m as u8;
    }
    if let Some(s) = o.streams {
        let ordered = module
            .tensors
            .iter()
            .any(|t| t.entry.flags.get() & ptovm_vm::format::TENSOR_STREAM != 0);
        if from_listing && ordered && module.config.streams.get() != s {
            return Err(rep.error(
                DiagKind::Type,
                start,
                "--streams cannot change the stream count of a listing with stream order (its stream key `... % N` is spelt out in the listing): assemble the `.pto` source with --streams, or edit the listing",
            ));
        }
        module.config.streams = U16::new(s);
    }
    let bytes = module.encode();
    if let Err(e) = ptovm_vm::verify(&bytes) {
        let span = spans.as_ref().and_then(|s| locate(s, &e)).unwrap_or(start);
        let what = if from_listing {
            "the listing does not describe a valid program"
        } else {
            "the assembled program does not verify (an assembler bug: please report it)"
        };
        return Err(rep.error(DiagKind::Verify, span, format!("{what}: {e}")));
    }
    Ok(Output {
        bytes,
        module,
        warnings: rep.warnings,
        from_listing,
    })
}

/// `src` with the dispatch policy of the schedule `sel` picks replaced by `policy` (or added to
/// it; or, without a schedule for the workload, a schedule of that one knob appended): the text
/// then assembles as any module, and an error in the policy points at it in its place.
fn with_dispatch(file: &str, src: &str, sel: &Select, policy: &str) -> Result<String, AsmError> {
    let rep = diag::Reporter::new(file, src);
    if listing::is_listing(src) {
        return Err(rep.error(
            DiagKind::Type,
            Span::new(0, 0),
            "--dispatch needs `.pto` module text: a listing's dispatch policy is already compiled",
        ));
    }
    if policy.contains(['{', '}', ';', '\n']) {
        return Err(rep.error(
            DiagKind::Syntax,
            Span::new(0, 0),
            format!("--dispatch {policy:?} is not one dispatch policy"),
        ));
    }
    let ast = ast::parse(&rep)?;
    let workload = match &sel.workload {
        Some(n) => ast.workloads.iter().find(|w| &w.name.name == n),
        None => ast.workloads.first(),
    };
    // The schedule `lower` will pick (it reports a wrong selection itself).
    let sched = match (&sel.schedule, workload) {
        (Some(n), _) => ast.schedules.iter().find(|s| &s.name.name == n),
        (None, Some(w)) => ast
            .schedules
            .iter()
            .find(|s| s.workload.name == w.name.name),
        (None, None) => None,
    };
    let knob = sched.and_then(|s| {
        s.knobs.iter().find_map(|k| match &k.value {
            ast::KnobValue::Dispatch(_, span) => Some(*span),
            _ => None,
        })
    });
    Ok(match (sched, knob) {
        (_, Some(span)) => format!("{}{policy}{}", &src[..span.start], &src[span.end..]),
        (Some(s), None) => format!(
            "{} dispatch = {policy}\n{}",
            &src[..s.open.end],
            &src[s.open.end..]
        ),
        (None, None) => match workload {
            Some(w) => format!(
                "{src}\n@schedule default for {} {{ dispatch = {policy} }}\n",
                w.name.name
            ),
            // No workload: `lower` reports it.
            None => src.to_string(),
        },
    })
}

fn locate(spans: &listing::SpanMap, e: &VerifyError) -> Option<Span> {
    let key = match (e.at.section, e.at.index) {
        (s, Some(i)) => (s, i),
        (Section::Config, None) => (Section::Config, 0),
        _ => return None,
    };
    spans.0.get(&key).copied()
}

/// Verifies `bytes` and prints them as listing text.
pub fn disassemble(bytes: &[u8]) -> Result<String, VerifyError> {
    let v = ptovm_vm::verify(bytes)?;
    Ok(listing::print(&Module::decode(&v)))
}

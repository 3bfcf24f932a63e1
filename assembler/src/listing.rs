//! The listing format: the disassembler's output, a line-per-record text form of a PTOW file
//! that the assembler turns back into identical bytes (spec/bytecode.md §9). The assembler
//! recognises it by its first directive, `.ptow 8`.

use std::collections::HashMap;
use std::fmt::Write as _;

use ptovm_vm::format::{
    is_module_text, layout_dim, limits, slot_max, CostUnit, KernelEntry, PolicySpec, RegionDim,
    TensorEntry, DIM_IS_SLOT, KERNEL_UNDECLARED, LAYOUT_NONE, LAYOUT_REPLICATE, LAYOUT_SHARD,
    NONE16, TENSOR_IMPLICIT, TENSOR_STREAM, WORKSPACE_UNIT,
};
use ptovm_vm::sched::CoreAlloc;
use ptovm_vm::{
    DType, Dir, ExprOp, Field, InfoKind, Level, Opcode, ParamKind, Policy, Pool, ReadyPolicy,
    Record, Section, Slot, StartPolicy, Timing, WindowMode, VERSION,
};
use zerocopy::little_endian::{U16, U32};

use crate::diag::{AsmError, DiagKind, Reporter, Span};
use crate::model::{Kernel, Module, Param, Tensor};

/// Whether `src` is listing text: its first directive is `.ptow`.
pub fn is_listing(src: &str) -> bool {
    src.lines()
        .map(|l| l.split(';').next().unwrap_or("").trim())
        .find(|l| !l.is_empty())
        .is_some_and(|l| l == ".ptow" || l.starts_with(".ptow ") || l.starts_with(".ptow\t"))
}

fn opt16(v: u16) -> String {
    if v == NONE16 {
        "-".to_string()
    } else {
        v.to_string()
    }
}

fn fields_text(r: &Record, fields: &[Field]) -> String {
    let mut s = String::new();
    for f in fields {
        let v = r.get(f.slot);
        if f.slot == Slot::Op2Signed {
            let _ = write!(s, " {}={}", f.name, v as i32);
        } else {
            let _ = write!(s, " {}={}", f.name, v);
        }
    }
    s
}

fn policy_text(p: &PolicySpec) -> String {
    let name = Policy::from_u8(p.kind).map_or("?", |p| p.name());
    format!(
        "policy={} depth={} key={}",
        name,
        p.depth,
        opt16(p.key.get())
    )
}

/// A tensor's layout word as text: `[S(0),R]`; empty for no layout.
pub fn layout_text(layout: u32) -> String {
    let dims: Vec<String> = (0..8)
        .map(|d| layout_dim(layout, d))
        .take_while(|&c| c != LAYOUT_NONE)
        .map(|c| {
            if c == LAYOUT_REPLICATE {
                "R".to_string()
            } else {
                format!("S({})", c - LAYOUT_SHARD)
            }
        })
        .collect();
    if dims.is_empty() {
        String::new()
    } else {
        format!("[{}]", dims.join(","))
    }
}

/// A runtime parameter's default as text: `4` or `[1,2,3]`.
pub fn default_text(kind: ParamKind, values: &[u32]) -> String {
    let v: Vec<String> = values.iter().map(u32::to_string).collect();
    match kind {
        ParamKind::Scalar => v.join(","),
        ParamKind::Array => format!("[{}]", v.join(",")),
    }
}

/// The name of level code `c` (`?` for an undefined code).
fn level_text(c: u8) -> &'static str {
    Level::from_u8(c).map_or("?", |l| l.name())
}

/// Prints a module as listing text.
pub fn print(m: &Module) -> String {
    let mut o = String::new();
    let c = &m.config;
    let _ = writeln!(
        o,
        "; PTOW v{} listing ({} bytes of bytecode). `ptovm asm` turns it back into identical bytes.",
        VERSION,
        m.encode().len()
    );
    let _ = writeln!(o, ".ptow {VERSION}");
    let _ = writeln!(o, ".workload {}", m.workload);
    let _ = writeln!(o, ".schedule {}", m.schedule);
    for (kind, text) in &m.info {
        let _ = writeln!(o, ".{} \"{}\"", kind.name(), text);
    }
    let name = |v: Option<&'static str>| v.unwrap_or("?");
    let _ = writeln!(
        o,
        ".config workload_level={} schedule_level={} aicpus={} {} levels={} selector={} streams={} timing={} timing_arg={} ready={} start={} start_threshold={} window={} window_mode={} pipeline_depth={} batch_deps={}{}{}",
        level_text(c.level & 0xF),
        level_text(c.level >> 4),
        c.num_aicpus.get(),
        policy_text(&c.policy),
        c.num_levels,
        opt16(c.selector.get()),
        c.streams.get(),
        name(Timing::from_u8(c.timing).map(|t| t.name())),
        c.timing_arg.get(),
        name(ReadyPolicy::from_u8(c.ready).map(|t| t.name())),
        name(StartPolicy::from_u8(c.start).map(|t| t.name())),
        c.start_threshold.get(),
        c.window.get(),
        name(WindowMode::from_u8(c.window_mode).map(|t| t.name())),
        c.pipeline_depth.get(),
        c.batch_deps.get(),
        match c.workspace_arena.get() {
            0 => String::new(),
            n => format!(" workspace={n}"),
        },
        match CoreAlloc::from_u8(c.cores) {
            Some(CoreAlloc::Shared) => String::new(),
            a => format!(" cores={}", a.map_or("?".into(), |a| a.to_string())),
        },
    );
    for i in 0..c.num_levels as usize {
        let _ = writeln!(
            o,
            ".level {} threshold={} {}",
            i,
            c.thresholds[i].get(),
            policy_text(&c.levels[i])
        );
    }
    for (i, p) in m.params.iter().enumerate() {
        match &p.default {
            Some(d) => {
                let _ = writeln!(
                    o,
                    ".param {} {} {} default={}",
                    i,
                    p.name,
                    p.kind.name(),
                    default_text(p.kind, d)
                );
            }
            None => {
                let _ = writeln!(o, ".param {} {} {}", i, p.name, p.kind.name());
            }
        }
    }
    for (i, p) in m.plans.iter().enumerate() {
        let _ = writeln!(o, ".plan {} {} expr={}", i, p.name, p.expr);
    }
    for (i, t) in m.tensors.iter().enumerate() {
        let e = &t.entry;
        let layout = match layout_text(e.layout.get()) {
            l if l.is_empty() => l,
            l => format!(" layout={l}"),
        };
        if e.flags.get() & TENSOR_IMPLICIT != 0 {
            let _ = writeln!(o, ".tensor {} {} implicit{}", i, t.name, layout);
            continue;
        }
        if e.flags.get() & TENSOR_STREAM != 0 {
            let _ = writeln!(o, ".tensor {} {} stream streams={}", i, t.name, e.dims[0]);
            continue;
        }
        let dims: Vec<String> = e.dims[..e.rank as usize]
            .iter()
            .map(|d| {
                let d = d.get();
                if d & DIM_IS_SLOT != 0 {
                    format!("${}", d & 0xFFFF)
                } else {
                    d.to_string()
                }
            })
            .collect();
        let dt = DType::from_u8(e.dtype).map_or("?", |d| d.name());
        let _ = writeln!(
            o,
            ".tensor {} {} {} dims=[{}]{}",
            i,
            t.name,
            dt,
            dims.join(","),
            layout
        );
    }
    for (i, k) in m.kernels.iter().enumerate() {
        let e = &k.entry;
        let pool = Pool::from_u8(e.pool).map_or("?", |p| p.name());
        if e.flags & KERNEL_UNDECLARED != 0 {
            let _ = writeln!(o, ".kernel {} {} {} undeclared", i, k.name, pool);
            continue;
        }
        let dirs: Vec<&str> = (0..e.num_args as u32)
            .map(|a| {
                Dir::from_u8(((e.arg_dirs.get() >> (2 * a)) & 3) as u8).map_or("?", |d| d.name())
            })
            .collect();
        let _ = writeln!(
            o,
            ".kernel {} {} {} params={} args=[{}]{}{}{}",
            i,
            k.name,
            pool,
            e.num_params,
            dirs.join(","),
            match e.workspace.get() {
                0 => String::new(),
                n => format!(" workspace={}", u32::from(n) * WORKSPACE_UNIT),
            },
            match e.cost() {
                None => String::new(),
                Some((expr, unit)) => format!(" cost={expr} unit={}", unit.name()),
            },
            match e.core_limit.get() {
                0 => String::new(),
                n => format!(" cores={n}"),
            }
        );
    }
    for (i, a) in m.axes.iter().enumerate() {
        let op = Opcode::from_u8(a.opcode);
        let _ = writeln!(
            o,
            ".axis {} {}{}",
            i,
            op.map_or("?", |o| o.mnemonic()),
            op.map_or(String::new(), |op| fields_text(a, op.fields()))
        );
    }
    for (i, e) in m.exprs.iter().enumerate() {
        let op = ExprOp::from_u8(e.opcode);
        let _ = writeln!(
            o,
            ".expr {} {}{}",
            i,
            op.map_or("?", |o| o.mnemonic()),
            op.map_or(String::new(), |op| fields_text(e, op.fields()))
        );
    }
    for (i, r) in m.regions.iter().enumerate() {
        let _ = writeln!(
            o,
            ".region {} start={} end={}",
            i,
            r.start.get(),
            opt16(r.end.get())
        );
    }
    let _ = writeln!(o, ".code");
    let mut ends: Vec<u32> = Vec::new();
    for (pc, r) in m.code.iter().enumerate() {
        let pc = pc as u32;
        while ends.last().is_some_and(|e| *e <= pc) {
            ends.pop();
        }
        let Some(op) = Opcode::from_u8(r.opcode) else {
            let _ = writeln!(o, "{:6}  ? byte=0x{:02X}", pc, r.opcode);
            continue;
        };
        let mut comment = String::new();
        match op {
            Opcode::TASK => {
                if let Some(k) = m.kernels.get(r.op1() as usize) {
                    comment = format!("  ; {}", k.name);
                }
            }
            Opcode::IO_INPUT | Opcode::IO_OUTPUT | Opcode::IO_INOUT => {
                if let Some(t) = m.tensors.get(r.op1() as usize) {
                    comment = format!("  ; {}", t.name);
                }
            }
            _ => {}
        }
        let indent = "  ".repeat(ends.len());
        let _ = writeln!(
            o,
            "{:6}  {}{}{}{}",
            pc,
            indent,
            op.mnemonic(),
            fields_text(r, op.fields()),
            comment
        );
        if op.has_body() {
            ends.push(r.op2());
        }
    }
    o
}

/// Where each record of a parsed listing was written: (section, index) → line span, so a
/// verifier error can point at the line that caused it.
#[derive(Clone, Debug, Default)]
pub struct SpanMap(pub HashMap<(Section, u32), Span>);

/// One whitespace-separated word of a listing line.
#[derive(Clone, Copy, Debug)]
struct Word<'s> {
    text: &'s str,
    span: Span,
}

fn words(line: &str, base: usize) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, ch) in line.char_indices() {
        if ch.is_whitespace() {
            if let Some(s) = start.take() {
                out.push(Word {
                    text: &line[s..i],
                    span: Span::new(base + s, base + i),
                });
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(Word {
            text: &line[s..],
            span: Span::new(base + s, base + line.len()),
        });
    }
    out
}

struct P<'r, 's> {
    rep: &'r Reporter<'s>,
}

impl<'s> P<'_, 's> {
    fn err(&self, span: Span, msg: impl Into<String>) -> AsmError {
        self.rep.error(DiagKind::Listing, span, msg)
    }

    fn num(&self, w: &Word<'_>, text: &str, max: u64) -> Result<u64, AsmError> {
        let v = crate::lexer::int_value(text).ok_or_else(|| {
            self.err(
                w.span,
                format!("expected an unsigned integer, found {text:?}"),
            )
        })?;
        if v > max {
            return Err(self.rep.error(
                DiagKind::Overflow,
                w.span,
                format!("{v} is larger than {max}"),
            ));
        }
        Ok(v)
    }

    fn opt16(&self, w: &Word<'_>, text: &str) -> Result<u16, AsmError> {
        if text == "-" {
            return Ok(NONE16);
        }
        Ok(self.num(w, text, 0xFFFE)? as u16)
    }

    /// Splits `key=value` words into a map; each key at most once.
    fn kv<'w>(&self, ws: &'w [Word<'s>]) -> Result<KV<'w, 's>, AsmError> {
        let mut map = HashMap::new();
        for w in ws {
            let Some((k, v)) = w.text.split_once('=') else {
                return Err(self.err(w.span, format!("expected key=value, found {:?}", w.text)));
            };
            if map.insert(k, (v, w)).is_some() {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    w.span,
                    format!("`{k}` given twice"),
                ));
            }
        }
        Ok(KV { map, all: ws })
    }

    fn index(
        &self,
        w: Option<&Word<'_>>,
        expected: usize,
        what: &str,
        line_span: Span,
    ) -> Result<(), AsmError> {
        let Some(w) = w else {
            return Err(self.err(line_span, format!("missing {what} index")));
        };
        let v = self.num(w, w.text, u32::MAX as u64)?;
        if v != expected as u64 {
            return Err(self.err(
                w.span,
                format!("{what} index {v} out of sequence; expected {expected}"),
            ));
        }
        Ok(())
    }

    fn name(&self, w: Option<&Word<'s>>, line_span: Span) -> Result<String, AsmError> {
        let Some(w) = w else {
            return Err(self.err(line_span, "missing name"));
        };
        let ok = w.text.len() <= 255
            && w.text
                .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && w.text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(self.err(
                w.span,
                format!(
                    "{:?} is not a name (an identifier of at most 255 characters)",
                    w.text
                ),
            ));
        }
        Ok(w.text.to_string())
    }

    /// A module-header line, `.module "TEXT"`, `.version "TEXT"` or `.target "TEXT"` (an
    /// optional `; comment` after it); `None` for any other line.
    fn info_line(&self, raw: &str, base: usize) -> Result<Option<(InfoKind, String)>, AsmError> {
        let lead = raw.len() - raw.trim_start().len();
        let line = raw.trim_start();
        let Some(kind) = InfoKind::ALL.iter().copied().find(|k| {
            line.strip_prefix('.')
                .and_then(|l| l.strip_prefix(k.name()))
                .is_some_and(|rest| rest.starts_with([' ', '\t']))
        }) else {
            return Ok(None);
        };
        let after = &line[1 + kind.name().len()..];
        let at = base + lead + 1 + kind.name().len() + (after.len() - after.trim_start().len());
        let body = after.trim_start();
        let span = Span::new(at, base + raw.trim_end().len());
        let Some(quoted) = body.strip_prefix('"') else {
            return Err(self.err(span, format!("`.{}` takes quoted text", kind.name())));
        };
        let Some(close) = quoted.find('"') else {
            return Err(self.err(span, "unterminated text: a closing '\"' is missing"));
        };
        let (text, tail) = (&quoted[..close], quoted[close + 1..].trim());
        if !(tail.is_empty() || tail.starts_with(';')) {
            return Err(self.err(span, "unexpected text after the closing '\"'"));
        }
        if !is_module_text(text.as_bytes()) {
            return Err(self.err(
                span,
                "module-header text is at most 255 bytes of printable ASCII without '\"' or '\\'",
            ));
        }
        Ok(Some((kind, text.to_string())))
    }

    /// A parameter's `default=` value: `N` for a scalar, `[a,b,...]` for an array.
    fn default_values(&self, w: &Word<'_>, v: &str, kind: ParamKind) -> Result<Vec<u32>, AsmError> {
        let inner = match kind {
            ParamKind::Scalar => v,
            ParamKind::Array => v
                .strip_prefix('[')
                .and_then(|v| v.strip_suffix(']'))
                .ok_or_else(|| self.err(w.span, "an array default is written default=[a,b,...]"))?,
        };
        if inner.is_empty() && kind == ParamKind::Array {
            return Ok(vec![]);
        }
        let vals = inner
            .split(',')
            .map(|x| Ok(self.num(w, x, u32::MAX as u64)? as u32))
            .collect::<Result<Vec<u32>, AsmError>>()?;
        if kind == ParamKind::Scalar && vals.len() != 1 {
            return Err(self.err(w.span, "a scalar default is one value"));
        }
        Ok(vals)
    }

    /// A tensor's `layout=[S(k),R,...]`.
    fn layout(&self, w: &Word<'_>, v: &str) -> Result<u32, AsmError> {
        let inner = v
            .strip_prefix('[')
            .and_then(|v| v.strip_suffix(']'))
            .filter(|i| !i.is_empty())
            .ok_or_else(|| self.err(w.span, "a layout is written layout=[S(0),R,...]"))?;
        let dims: Vec<&str> = inner.split(',').collect();
        if dims.len() > limits::MAX_RANK {
            return Err(self
                .rep
                .error(DiagKind::Limit, w.span, "at most 8 layout dimensions"));
        }
        let mut word = 0u32;
        for (d, text) in dims.iter().enumerate() {
            let code = match text.strip_prefix("S(").and_then(|t| t.strip_suffix(')')) {
                Some(k) => LAYOUT_SHARD + self.num(w, k, limits::MAX_MESH_AXIS as u64)? as u32,
                None if *text == "R" => LAYOUT_REPLICATE,
                None => {
                    return Err(self.err(
                        w.span,
                        format!("layout dimension {text:?} is neither R nor S(k)"),
                    ))
                }
            };
            word |= code << (4 * d);
        }
        Ok(word)
    }

    /// Parses `MNEMONIC field=value ...` for an opcode or expression operator.
    fn record(
        &self,
        ws: &[Word<'s>],
        line_span: Span,
        code: u8,
        fields: &[Field],
    ) -> Result<Record, AsmError> {
        let kv = self.kv(ws)?;
        let mut r = Record::new(code, 0, 0, 0);
        for f in fields {
            let Some((v, w)) = kv.map.get(f.name) else {
                return Err(self.err(line_span, format!("missing field `{}`", f.name)));
            };
            let value = if f.slot == Slot::Op2Signed {
                let neg = v.starts_with('-');
                let mag = self.num(
                    w,
                    v.trim_start_matches('-'),
                    if neg { 1 << 31 } else { i32::MAX as u64 },
                )?;
                (if neg {
                    (mag as i64).wrapping_neg()
                } else {
                    mag as i64
                }) as i32 as u32
            } else {
                self.num(w, v, slot_max(f.slot) as u64)? as u32
            };
            r.set(f.slot, value);
        }
        kv.no_extra(self, fields.iter().map(|f| f.name))?;
        Ok(r)
    }
}

struct KV<'w, 's> {
    map: HashMap<&'s str, (&'s str, &'w Word<'s>)>,
    all: &'w [Word<'s>],
}

impl<'s> KV<'_, 's> {
    fn get<'a>(
        &'a self,
        p: &P<'_, 's>,
        key: &str,
        line_span: Span,
    ) -> Result<(&'s str, &'a Word<'s>), AsmError> {
        self.map
            .get(key)
            .map(|(v, w)| (*v, *w))
            .ok_or_else(|| p.err(line_span, format!("missing field `{key}`")))
    }
    fn no_extra<'k>(
        &self,
        p: &P<'_, 's>,
        known: impl Iterator<Item = &'k str> + Clone,
    ) -> Result<(), AsmError> {
        for w in self.all {
            let k = w.text.split_once('=').map_or(w.text, |(k, _)| k);
            if !known.clone().any(|n| n == k) {
                return Err(p.err(w.span, format!("unknown field `{k}`")));
            }
        }
        Ok(())
    }
}

fn named<T>(
    p: &P<'_, '_>,
    w: &Word<'_>,
    v: &str,
    what: &str,
    f: impl Fn(&str) -> Option<T>,
) -> Result<T, AsmError> {
    f(v).ok_or_else(|| {
        p.rep
            .error(DiagKind::Type, w.span, format!("unknown {what} {v:?}"))
    })
}

fn parse_policy<'s>(p: &P<'_, 's>, kv: &KV<'_, 's>, line: Span) -> Result<PolicySpec, AsmError> {
    let (v, w) = kv.get(p, "policy", line)?;
    let kind = named(p, w, v, "policy", Policy::from_name)?;
    let (v, w) = kv.get(p, "depth", line)?;
    let depth = p.num(w, v, 255)? as u8;
    let (v, w) = kv.get(p, "key", line)?;
    let key = p.opt16(w, v)?;
    Ok(PolicySpec {
        kind: kind as u8,
        depth,
        key: U16::new(key),
    })
}

/// Parses listing text into a module. The result is encoded as is: if the listing came from
/// `print`, the bytes are identical to the disassembled ones.
pub fn parse(rep: &Reporter<'_>, src: &str) -> Result<(Module, SpanMap), AsmError> {
    let p = P { rep };
    let mut spans = SpanMap::default();
    let mut m = Module::new("", "");
    m.code.clear();
    let mut seen_ptow = false;
    let mut in_code = false;
    let mut workload: Option<String> = None;
    let mut schedule: Option<String> = None;
    let mut seen_config = false;
    let mut levels_seen = 0usize;
    let mut offset = 0usize;
    for raw in src.split_inclusive('\n') {
        let base = offset;
        offset += raw.len();
        // Module-header lines carry quoted text, which may hold `;` and spaces.
        if seen_ptow && !in_code {
            if let Some((kind, text)) = p.info_line(raw, base)? {
                if !seen_config {
                    m.info.push((kind, text));
                    continue;
                }
                return Err(p.err(
                    Span::new(base, base + raw.trim_end().len()),
                    "module-header lines come before `.config`",
                ));
            }
        }
        let line = raw.split(';').next().unwrap_or("");
        let ws = words(line, base);
        let Some(first) = ws.first() else { continue };
        let line_span = Span::new(
            first.span.start,
            ws.last().map_or(first.span.end, |w| w.span.end),
        );
        if !seen_ptow {
            if first.text != ".ptow" {
                return Err(p.err(
                    first.span,
                    format!("a listing starts with `.ptow {VERSION}`"),
                ));
            }
            let Some(v) = ws.get(1) else {
                return Err(p.err(line_span, "`.ptow` needs a version"));
            };
            if v.text != VERSION.to_string() {
                return Err(p.err(
                    v.span,
                    format!(
                        "unsupported listing version {:?}; this assembler reads and writes version {VERSION}",
                        v.text
                    ),
                ));
            }
            if let Some(w) = ws.get(2) {
                return Err(p.err(w.span, format!("unexpected text after `.ptow {VERSION}`")));
            }
            seen_ptow = true;
            continue;
        }
        if in_code {
            // `INDEX MNEMONIC field=value ...`
            p.index(Some(first), m.code.len(), "instruction", line_span)?;
            let Some(mn) = ws.get(1) else {
                return Err(p.err(line_span, "missing mnemonic"));
            };
            let op = Opcode::from_mnemonic(mn.text).ok_or_else(|| {
                p.rep.error(
                    DiagKind::UnknownName,
                    mn.span,
                    format!("unknown opcode {:?}", mn.text),
                )
            })?;
            let r = p.record(&ws[2..], line_span, op as u8, op.fields())?;
            spans
                .0
                .insert((Section::Code, m.code.len() as u32), line_span);
            m.code.push(r);
            continue;
        }
        let rest = &ws[1..];
        let sec = match first.text {
            ".param" => Some((Section::Params, m.params.len())),
            ".plan" => Some((Section::Plans, m.plans.len())),
            ".tensor" => Some((Section::Tensors, m.tensors.len())),
            ".kernel" => Some((Section::Kernels, m.kernels.len())),
            ".axis" => Some((Section::Axes, m.axes.len())),
            ".expr" => Some((Section::Exprs, m.exprs.len())),
            ".region" => Some((Section::Regions, m.regions.len())),
            ".config" | ".level" => Some((Section::Config, 0)),
            _ => None,
        };
        if let Some((s, i)) = sec {
            spans.0.entry((s, i as u32)).or_insert(line_span);
        }
        match first.text {
            ".workload" | ".schedule" => {
                let n = p.name(rest.first(), line_span)?;
                if let Some(w) = rest.get(1) {
                    return Err(p.err(w.span, "unexpected text after the name"));
                }
                let slot = if first.text == ".workload" {
                    &mut workload
                } else {
                    &mut schedule
                };
                if slot.replace(n).is_some() {
                    return Err(p.rep.error(
                        DiagKind::DuplicateName,
                        first.span,
                        format!("`{}` given twice", first.text),
                    ));
                }
            }
            ".config" => {
                if seen_config {
                    return Err(p.rep.error(
                        DiagKind::DuplicateName,
                        first.span,
                        "`.config` given twice",
                    ));
                }
                seen_config = true;
                let kv = p.kv(rest)?;
                let c = &mut m.config;
                let g = |k: &str| kv.get(&p, k, line_span);
                let (v, w) = g("workload_level")?;
                let wl = named(&p, w, v, "level", Level::from_name)? as u8;
                let (v, w) = g("schedule_level")?;
                c.level = wl | (named(&p, w, v, "level", Level::from_name)? as u8) << 4;
                let (v, w) = g("aicpus")?;
                c.num_aicpus = U16::new(p.num(w, v, u16::MAX as u64)? as u16);
                c.policy = parse_policy(&p, &kv, line_span)?;
                let (v, w) = g("levels")?;
                c.num_levels = p.num(w, v, 8)? as u8;
                let (v, w) = g("selector")?;
                c.selector = U16::new(p.opt16(w, v)?);
                let (v, w) = g("streams")?;
                c.streams = U16::new(p.num(w, v, u16::MAX as u64)? as u16);
                let (v, w) = g("timing")?;
                c.timing = named(&p, w, v, "timing", Timing::from_name)? as u8;
                let (v, w) = g("timing_arg")?;
                c.timing_arg = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                let (v, w) = g("ready")?;
                c.ready = named(&p, w, v, "ready policy", ReadyPolicy::from_name)? as u8;
                let (v, w) = g("start")?;
                c.start = named(&p, w, v, "start policy", StartPolicy::from_name)? as u8;
                let (v, w) = g("start_threshold")?;
                c.start_threshold = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                let (v, w) = g("window")?;
                c.window = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                let (v, w) = g("window_mode")?;
                c.window_mode = named(&p, w, v, "window mode", WindowMode::from_name)? as u8;
                let (v, w) = g("pipeline_depth")?;
                c.pipeline_depth = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                let (v, w) = g("batch_deps")?;
                c.batch_deps = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                if let Some((v, w)) = kv.map.get("workspace") {
                    c.workspace_arena = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                }
                if let Some((v, w)) = kv.map.get("cores") {
                    c.cores = named(&p, w, v, "core allocation", CoreAlloc::from_name)?.code();
                }
                kv.no_extra(
                    &p,
                    [
                        "workload_level",
                        "schedule_level",
                        "aicpus",
                        "policy",
                        "depth",
                        "key",
                        "levels",
                        "selector",
                        "streams",
                        "timing",
                        "timing_arg",
                        "ready",
                        "start",
                        "start_threshold",
                        "window",
                        "window_mode",
                        "pipeline_depth",
                        "batch_deps",
                        "workspace",
                        "cores",
                    ]
                    .into_iter(),
                )?;
            }
            ".level" => {
                p.index(rest.first(), levels_seen, "level", line_span)?;
                if levels_seen >= 8 {
                    return Err(p.rep.error(DiagKind::Limit, first.span, "at most 8 levels"));
                }
                let kv = p.kv(&rest[1..])?;
                let (v, w) = kv.get(&p, "threshold", line_span)?;
                m.config.thresholds[levels_seen] = U32::new(p.num(w, v, u32::MAX as u64)? as u32);
                m.config.levels[levels_seen] = parse_policy(&p, &kv, line_span)?;
                kv.no_extra(&p, ["threshold", "policy", "depth", "key"].into_iter())?;
                levels_seen += 1;
            }
            ".param" => {
                p.index(rest.first(), m.params.len(), "param", line_span)?;
                let name = p.name(rest.get(1), line_span)?;
                let Some(k) = rest.get(2) else {
                    return Err(p.err(line_span, "missing parameter kind (scalar or array)"));
                };
                let kind = named(&p, k, k.text, "parameter kind", ParamKind::from_name)?;
                let kv = p.kv(&rest[3..])?;
                kv.no_extra(&p, ["default"].into_iter())?;
                let default = match kv.map.get("default") {
                    Some((v, w)) => Some(p.default_values(w, v, kind)?),
                    None => None,
                };
                m.params.push(Param {
                    name,
                    kind,
                    default,
                });
            }
            ".plan" => {
                p.index(rest.first(), m.plans.len(), "plan", line_span)?;
                let name = p.name(rest.get(1), line_span)?;
                let kv = p.kv(&rest[2..])?;
                let (v, w) = kv.get(&p, "expr", line_span)?;
                let expr = p.num(w, v, 0xFFFE)? as u16;
                kv.no_extra(&p, ["expr"].into_iter())?;
                m.plans.push(crate::model::Plan { name, expr });
            }
            ".tensor" => {
                p.index(rest.first(), m.tensors.len(), "tensor", line_span)?;
                let name = p.name(rest.get(1), line_span)?;
                let Some(k) = rest.get(2) else {
                    return Err(p.err(line_span, "missing dtype (or `implicit` or `stream`)"));
                };
                let mut entry = TensorEntry::default();
                if k.text == "stream" {
                    let kv = p.kv(&rest[3..])?;
                    let (v, w) = kv.get(&p, "streams", line_span)?;
                    entry.flags = U32::new(TENSOR_STREAM);
                    entry.rank = 1;
                    entry.dims[0] = U32::new(p.num(w, v, u16::MAX as u64)? as u32);
                    kv.no_extra(&p, ["streams"].into_iter())?;
                } else if k.text == "implicit" {
                    entry.flags = U32::new(TENSOR_IMPLICIT);
                    let kv = p.kv(&rest[3..])?;
                    kv.no_extra(&p, ["layout"].into_iter())?;
                    if let Some((v, w)) = kv.map.get("layout") {
                        entry.layout = U32::new(p.layout(w, v)?);
                    }
                } else {
                    entry.dtype = named(&p, k, k.text, "dtype", DType::from_name)? as u8;
                    let kv = p.kv(&rest[3..])?;
                    let (v, w) = kv.get(&p, "dims", line_span)?;
                    let inner = v
                        .strip_prefix('[')
                        .and_then(|v| v.strip_suffix(']'))
                        .ok_or_else(|| p.err(w.span, "dims are written dims=[a,b,...]"))?;
                    let dims: Vec<&str> = if inner.is_empty() {
                        vec![]
                    } else {
                        inner.split(',').collect()
                    };
                    if dims.len() > 8 {
                        return Err(p.rep.error(DiagKind::Limit, w.span, "at most 8 dimensions"));
                    }
                    entry.rank = dims.len() as u8;
                    for (i, d) in dims.iter().enumerate() {
                        entry.dims[i] = U32::new(match d.strip_prefix('$') {
                            Some(slot) => DIM_IS_SLOT | p.num(w, slot, 0xFFFF)? as u32,
                            None => p.num(w, d, (DIM_IS_SLOT - 1) as u64)? as u32,
                        });
                    }
                    if let Some((v, w)) = kv.map.get("layout") {
                        entry.layout = U32::new(p.layout(w, v)?);
                    }
                    kv.no_extra(&p, ["dims", "layout"].into_iter())?;
                }
                m.tensors.push(Tensor { name, entry });
            }
            ".kernel" => {
                p.index(rest.first(), m.kernels.len(), "kernel", line_span)?;
                let name = p.name(rest.get(1), line_span)?;
                let Some(k) = rest.get(2) else {
                    return Err(p.err(line_span, "missing pool (cube or vector)"));
                };
                let mut entry = KernelEntry {
                    pool: named(&p, k, k.text, "pool", Pool::from_name)? as u8,
                    ..Default::default()
                };
                if rest.get(3).is_some_and(|w| w.text == "undeclared") {
                    entry.flags = KERNEL_UNDECLARED;
                    if let Some(w) = rest.get(4) {
                        return Err(p.err(w.span, "unexpected text"));
                    }
                } else {
                    let kv = p.kv(&rest[3..])?;
                    let (v, w) = kv.get(&p, "params", line_span)?;
                    entry.num_params = p.num(w, v, 255)? as u8;
                    let (v, w) = kv.get(&p, "args", line_span)?;
                    let inner = v
                        .strip_prefix('[')
                        .and_then(|v| v.strip_suffix(']'))
                        .ok_or_else(|| p.err(w.span, "args are written args=[in,out,...]"))?;
                    let dirs: Vec<&str> = if inner.is_empty() {
                        vec![]
                    } else {
                        inner.split(',').collect()
                    };
                    if dirs.len() > 16 {
                        return Err(p.rep.error(DiagKind::Limit, w.span, "at most 16 arguments"));
                    }
                    entry.num_args = dirs.len() as u8;
                    let mut bits = 0u32;
                    for (i, d) in dirs.iter().enumerate() {
                        bits |= (named(&p, w, d, "direction", Dir::from_name)? as u32) << (2 * i);
                    }
                    entry.arg_dirs = U32::new(bits);
                    if let Some((v, w)) = kv.map.get("workspace") {
                        let unit = u64::from(WORKSPACE_UNIT);
                        let bytes = p.num(w, v, u64::from(u16::MAX) * unit)?;
                        if bytes % unit != 0 {
                            return Err(p.err(
                                w.span,
                                format!("a workspace is whole {unit}-byte lines; {bytes} is not"),
                            ));
                        }
                        entry.workspace = U16::new((bytes / unit) as u16);
                    }
                    if let Some((v, w)) = kv.map.get("cost") {
                        entry.cost_expr = U16::new(p.num(w, v, 0xFFFE)? as u16);
                        let (v, w) = kv.get(&p, "unit", line_span)?;
                        entry.cost_unit = match v {
                            "ns" => CostUnit::Ns,
                            "cycles" => CostUnit::Cycles,
                            _ => return Err(p.err(w.span, "a cost's unit is ns or cycles")),
                        } as u8;
                    }
                    if let Some((v, w)) = kv.map.get("cores") {
                        entry.core_limit = U16::new(p.num(w, v, u64::from(u16::MAX))? as u16);
                    }
                    kv.no_extra(
                        &p,
                        ["params", "args", "workspace", "cost", "unit", "cores"].into_iter(),
                    )?;
                }
                m.kernels.push(Kernel { name, entry });
            }
            ".axis" => {
                p.index(rest.first(), m.axes.len(), "axis", line_span)?;
                let Some(mn) = rest.get(1) else {
                    return Err(p.err(line_span, "missing axis opcode"));
                };
                let op = Opcode::from_mnemonic(mn.text).ok_or_else(|| {
                    p.rep.error(
                        DiagKind::UnknownName,
                        mn.span,
                        format!("unknown opcode {:?}", mn.text),
                    )
                })?;
                m.axes
                    .push(p.record(&rest[2..], line_span, op as u8, op.fields())?);
            }
            ".expr" => {
                p.index(rest.first(), m.exprs.len(), "expr", line_span)?;
                let Some(mn) = rest.get(1) else {
                    return Err(p.err(line_span, "missing expression operator"));
                };
                let op = ExprOp::from_mnemonic(mn.text).ok_or_else(|| {
                    p.rep.error(
                        DiagKind::UnknownName,
                        mn.span,
                        format!("unknown expression operator {:?}", mn.text),
                    )
                })?;
                m.exprs
                    .push(p.record(&rest[2..], line_span, op as u8, op.fields())?);
            }
            ".region" => {
                p.index(rest.first(), m.regions.len(), "region", line_span)?;
                let kv = p.kv(&rest[1..])?;
                let (v, w) = kv.get(&p, "start", line_span)?;
                let start = p.num(w, v, 0xFFFE)? as u16;
                let (v, w) = kv.get(&p, "end", line_span)?;
                let end = p.opt16(w, v)?;
                kv.no_extra(&p, ["start", "end"].into_iter())?;
                m.regions.push(RegionDim {
                    start: U16::new(start),
                    end: U16::new(end),
                });
            }
            ".code" => {
                if let Some(w) = rest.first() {
                    return Err(p.err(w.span, "unexpected text after `.code`"));
                }
                in_code = true;
            }
            _ => {
                return Err(p.rep.error(
                    DiagKind::Listing,
                    first.span,
                    format!("unknown directive {:?}", first.text),
                ))
            }
        }
    }
    let end = Span::new(src.len(), src.len());
    if !seen_ptow {
        return Err(p.err(end, format!("empty listing: expected `.ptow {VERSION}`")));
    }
    if !in_code {
        return Err(p.err(end, "listing has no `.code` section"));
    }
    if !seen_config {
        return Err(p.err(end, "listing has no `.config` line"));
    }
    if levels_seen != m.config.num_levels as usize {
        return Err(p.err(
            end,
            format!(
                "`.config` says levels={} but {} `.level` lines follow",
                m.config.num_levels, levels_seen
            ),
        ));
    }
    m.workload = workload.ok_or_else(|| p.err(end, "listing has no `.workload` line"))?;
    m.schedule = schedule.ok_or_else(|| p.err(end, "listing has no `.schedule` line"))?;
    Ok((m, spans))
}

/// Renders the expression starting at node `start` as infix text (loop variables as `v0`,
/// `v1`, ... by depth; runtime parameters by name). For verified modules; malformed nodes are
/// shown as `?`.
pub fn render_expr(m: &Module, start: u16) -> String {
    render_expr_in(m, start, 0)
}

/// [`render_expr`] of a reduction body nested `nesting` deep (bodies of deeper ones past the
/// limit render as `?`).
fn render_expr_in(m: &Module, start: u16, nesting: usize) -> String {
    let pname = |s: u16| {
        let planned = (s as usize)
            .checked_sub(m.params.len())
            .and_then(|i| m.plans.get(i));
        m.params
            .get(s as usize)
            .map(|p| p.name.clone())
            .or_else(|| planned.map(|p| p.name.clone()))
            .unwrap_or_else(|| format!("${s}"))
    };
    let mut st: Vec<(String, u8)> = Vec::new(); // (text, precedence: 9 = atom)
    for r in m
        .exprs
        .iter()
        .skip(start as usize)
        .take(ptovm_vm::limits::MAX_EXPR_LEN)
    {
        let Some(op) = ExprOp::from_u8(r.opcode) else {
            return "?".into();
        };
        let prec = |op: ExprOp| match op {
            ExprOp::OR => 1,
            ExprOp::AND => 2,
            ExprOp::EQ | ExprOp::NE => 3,
            ExprOp::LT | ExprOp::LE | ExprOp::GT | ExprOp::GE => 4,
            ExprOp::ADD | ExprOp::SUB => 5,
            ExprOp::MUL | ExprOp::DIV | ExprOp::MOD => 6,
            _ => 9,
        };
        match op {
            ExprOp::END => return st.pop().map_or("?".into(), |(s, _)| s),
            ExprOp::CONST => st.push(((r.op2() as i32).to_string(), 9)),
            ExprOp::VAR => st.push((format!("v{}", r.op1()), 9)),
            ExprOp::ARG => st.push((format!("a{}", r.op1()), 9)),
            ExprOp::SIZE => st.push((
                match r.op2() {
                    0 => format!("size(r{})", r.op1()),
                    d => format!("extent(r{}, {})", r.op1(), d - 1),
                },
                9,
            )),
            ExprOp::PARAM => st.push((pname(r.op1()), 9)),
            ExprOp::ELEM => {
                let Some((i, _)) = st.pop() else {
                    return "?".into();
                };
                st.push((format!("{}[{}]", pname(r.op1()), i), 9));
            }
            ExprOp::NEG | ExprOp::NOT => {
                let Some((a, p)) = st.pop() else {
                    return "?".into();
                };
                let a = if p < 9 { format!("({a})") } else { a };
                st.push((format!("{}{}", op.symbol(), a), 9));
            }
            ExprOp::MIN | ExprOp::MAX | ExprOp::CEILDIV => {
                let (Some((b, _)), Some((a, _))) = (st.pop(), st.pop()) else {
                    return "?".into();
                };
                st.push((format!("{}({a}, {b})", op.symbol()), 9));
            }
            ExprOp::SUM | ExprOp::MAXOF | ExprOp::MINOF | ExprOp::SEARCH => {
                let (Some((hi, _)), Some((lo, _))) = (st.pop(), st.pop()) else {
                    return "?".into();
                };
                // A verified body comes before the node: no cycle; the nesting is bounded.
                let body = if nesting < ptovm_vm::limits::MAX_PLAN_NESTING
                    && (r.op2() as usize) < start as usize
                {
                    render_expr_in(m, r.op2() as u16, nesting + 1)
                } else {
                    "?".into()
                };
                st.push((
                    format!("{}(v{} in {lo} .. {hi}: {body})", op.symbol(), r.op1()),
                    9,
                ));
            }
            _ => {
                let (Some((b, pb)), Some((a, pa))) = (st.pop(), st.pop()) else {
                    return "?".into();
                };
                let p = prec(op);
                let a = if pa < p { format!("({a})") } else { a };
                let b = if pb <= p { format!("({b})") } else { b };
                st.push((format!("{a} {} {b}", op.symbol()), p));
            }
        }
    }
    "?".into()
}

/// Renders an axis as `.pto` text (`dense[8]`, `ragged(v0, lens)`, ...).
pub fn render_axis(m: &Module, id: u16) -> String {
    let pname = |s: u32| {
        let planned = (s as usize)
            .checked_sub(m.params.len())
            .and_then(|i| m.plans.get(i));
        m.params
            .get(s as usize)
            .map(|p| p.name.clone())
            .or_else(|| planned.map(|p| p.name.clone()))
            .unwrap_or_else(|| format!("${s}"))
    };
    let Some(r) = m.axes.get(id as usize) else {
        return "?".into();
    };
    match Opcode::from_u8(r.opcode) {
        Some(Opcode::AXIS_DENSE) => format!("dense[{}]", r.op2()),
        Some(Opcode::AXIS_DENSE_DYN) => format!("dense_dyn({})", pname(r.op1() as u32)),
        Some(Opcode::AXIS_RAGGED) => format!(
            "ragged({}, {})",
            render_expr(m, r.op2() as u16),
            pname(r.op1() as u32)
        ),
        Some(Opcode::AXIS_RAGGED_ROW) => format!(
            "dense_dyn({}[{}])",
            pname(r.op1() as u32),
            render_expr(m, r.op2() as u16)
        ),
        Some(op @ (Opcode::AXIS_SPARSE | Opcode::AXIS_SPARSE_ROW)) => {
            format!(
                "{}({}, {}, {})",
                if op == Opcode::AXIS_SPARSE {
                    "sparse"
                } else {
                    "sparse_row"
                },
                render_expr(m, (r.op2() & 0xFFFF) as u16),
                pname(r.op1() as u32),
                pname(r.op2() >> 16)
            )
        }
        // A verified base is an earlier axis (and not a tile): no recursion past one level.
        Some(Opcode::AXIS_TILE) if r.op1() < id => format!(
            "tile({}, {})",
            render_axis(m, r.op1()),
            render_expr(m, r.op2() as u16)
        ),
        _ => "?".into(),
    }
}

/// Renders one policy (not a threshold) as `.pto` text.
pub fn render_policy(m: &Module, p: &PolicySpec) -> String {
    match Policy::from_u8(p.kind) {
        Some(Policy::RoundRobin) => "round_robin".into(),
        Some(Policy::Affinity) => format!("affinity({})", render_expr(m, p.key.get())),
        Some(Policy::Hash) => format!("hash({})", render_expr(m, p.key.get())),
        Some(Policy::StaticPartition) => format!("static(v{})", p.depth),
        Some(Policy::Threshold) => "threshold".into(),
        None => "?".into(),
    }
}

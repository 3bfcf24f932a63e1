//! The recursive-descent parser: items, statements and schedules.

use super::*;
use crate::lexer::string_value;

pub const MAX_EXPR_NESTING: usize = 64;

pub(super) struct Parser<'r, 's> {
    pub(super) rep: &'r Reporter<'s>,
    pub(super) toks: Vec<Token<'s>>,
    pub(super) pos: usize,
    pub(super) nesting: usize,
    pub(super) expr_nesting: usize,
    /// Nodes of the top-level expression being parsed.
    pub(super) expr_nodes: usize,
}

pub(super) type PR<T> = Result<T, AsmError>;

/// Parses module text.
pub fn parse(rep: &Reporter<'_>) -> PR<ModuleAst> {
    let toks = lex(rep, rep.src)?;
    let mut p = Parser {
        rep,
        toks,
        pos: 0,
        nesting: 0,
        expr_nesting: 0,
        expr_nodes: 0,
    };
    p.module()
}

fn describe(t: &Token<'_>) -> String {
    match t.kind {
        Tok::Eof => "end of file".to_string(),
        _ => format!("`{}`", t.text),
    }
}

impl<'s> Parser<'_, 's> {
    pub(super) fn peek(&self) -> Token<'s> {
        self.toks[self.pos.min(self.toks.len() - 1)]
    }
    pub(super) fn peek2(&self) -> Token<'s> {
        self.toks[(self.pos + 1).min(self.toks.len() - 1)]
    }
    pub(super) fn bump(&mut self) -> Token<'s> {
        let t = self.peek();
        if t.kind != Tok::Eof {
            self.pos += 1;
        }
        t
    }
    pub(super) fn err<T>(&self, span: Span, msg: impl Into<String>) -> PR<T> {
        Err(self.rep.error(DiagKind::Syntax, span, msg))
    }
    pub(super) fn expected<T>(&self, what: &str) -> PR<T> {
        let t = self.peek();
        self.err(t.span, format!("expected {what}, found {}", describe(&t)))
    }
    pub(super) fn eat(&mut self, s: &str) -> bool {
        if self.peek().is(s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    pub(super) fn expect(&mut self, s: &str) -> PR<Token<'s>> {
        if self.peek().is(s) {
            Ok(self.bump())
        } else {
            self.expected(&format!("`{s}`"))
        }
    }
    /// After a list element: `true` at the closing token (consumed), `false` after a `,`.
    pub(super) fn list_end(&mut self, close: &str) -> PR<bool> {
        if self.eat(close) {
            return Ok(true);
        }
        if self.eat(",") {
            return Ok(false);
        }
        self.expected(&format!("`,` or `{close}`"))
    }

    /// The items of a `,`-separated list after its opening token, up to and including `close`.
    pub(super) fn list<T>(
        &mut self,
        close: &str,
        mut item: impl FnMut(&mut Self) -> PR<T>,
    ) -> PR<Vec<T>> {
        let mut out = vec![];
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            if self.list_end(close)? {
                return Ok(out);
            }
        }
    }

    pub(super) fn ident(&mut self, what: &str) -> PR<Ident> {
        let t = self.peek();
        if t.kind == Tok::Ident {
            self.pos += 1;
            Ok(Ident {
                name: t.text.to_string(),
                span: t.span,
            })
        } else {
            self.expected(what)
        }
    }
    /// A keyword (or a value the grammar spells as one, such as a dtype or a knob's value),
    /// lower-cased: keywords match in any case, as in PTO-WSP. Names keep their case.
    pub(super) fn keyword(&mut self, what: &str) -> PR<Ident> {
        let mut id = self.ident(what)?;
        id.name.make_ascii_lowercase();
        Ok(id)
    }
    pub(super) fn int(&mut self, what: &str) -> PR<(u64, Span)> {
        let t = self.peek();
        if t.kind != Tok::Int {
            return self.expected(what);
        }
        self.pos += 1;
        match int_value(t.text) {
            Some(v) => Ok((v, t.span)),
            None => Err(self.rep.error(
                DiagKind::Overflow,
                t.span,
                format!("integer literal {} does not fit in 64 bits", t.text),
            )),
        }
    }
    pub(super) fn enter(&mut self, span: Span) -> PR<()> {
        self.nesting += 1;
        if self.nesting > limits::MAX_NESTING {
            return Err(self.rep.error(
                DiagKind::Nesting,
                span,
                format!("statements nested deeper than {}", limits::MAX_NESTING),
            ));
        }
        Ok(())
    }

    pub(super) fn module(&mut self) -> PR<ModuleAst> {
        let mut m = ModuleAst::default();
        let mut items = false;
        loop {
            let t = self.peek();
            if t.kind == Tok::Eof {
                return Ok(m);
            }
            if self.eat(";") {
                continue;
            }
            // PTO-WSP's module header: `module "name"`, `version "text"`,
            // `target "a" | "b" ...`, before the first item.
            if t.kind == Tok::Ident && self.peek2().kind == Tok::Str {
                let kw = self.keyword("`module`, `version` or `target`")?;
                let Some(kind) = InfoKind::from_name(&kw.name) else {
                    return self.err(
                        kw.span,
                        format!(
                            "unknown header line `{}`; expected `module`, `version` or `target`",
                            kw.name
                        ),
                    );
                };
                if items {
                    return self.err(
                        kw.span,
                        format!(
                            "the module header (`{}`) comes before the first `@` item",
                            kw.name
                        ),
                    );
                }
                loop {
                    let s = self.bump();
                    m.header.push((kind, string_value(s.text), s.span));
                    if kind != InfoKind::Target || !self.eat("|") {
                        break;
                    }
                    if self.peek().kind != Tok::Str {
                        return self.expected("a target string after `|`");
                    }
                }
                continue;
            }
            if !t.is("@") {
                return self.expected("`@workload`, `@schedule`, `@tensor`, `@kernel`, `@param`, `@plan`, `@tiers` or a header line (`module \"name\"`)");
            }
            self.bump();
            items = true;
            let kw = self.keyword(
                "`workload`, `schedule`, `tensor`, `kernel`, `param`, `plan` or `tiers` after `@`",
            )?;
            match kw.name.as_str() {
                "workload" => m.workloads.push(self.workload()?),
                "schedule" => m.schedules.push(self.schedule()?),
                "tensor" => m.tensors.push(self.tensor()?),
                "kernel" => m.kernels.push(self.kernel()?),
                "param" => m.params.push(self.param()?),
                "tiers" => m.tiers.push(self.tiers(kw.span)?),
                "plan" => {
                    let name = self.ident("a planned value's name")?;
                    self.expect("=")?;
                    let expr = self.expr()?;
                    m.plans.push(PlanDecl { name, expr });
                }
                other => return self.err(kw.span, format!("unknown item `@{other}`; expected `@workload`, `@schedule`, `@tensor`, `@kernel`, `@param`, `@plan` or `@tiers`")),
            }
        }
    }

    /// An optional `[npu]` / `[cpu]` after `@workload` or `@schedule`.
    pub(super) fn level(&mut self) -> PR<Level> {
        if !self.eat("[") {
            return Ok(Level::Cpu);
        }
        let l = self.keyword("a level (`npu` or `cpu`)")?;
        let Some(level) = Level::from_name(&l.name) else {
            return Err(self.rep.error(
                DiagKind::UnknownName,
                l.span,
                format!("unknown level `{}`; expected `npu` or `cpu`", l.name),
            ));
        };
        self.expect("]")?;
        Ok(level)
    }

    /// The rest of `@tiers NAME(v) { cond: kernel, …, default: kernel }` after `tiers`.
    pub(super) fn tiers(&mut self, at: Span) -> PR<TierDecl> {
        let name = self.ident("a tier set's name")?;
        self.expect("(")?;
        let var = self.ident("the name of the value the tiers test")?;
        self.expect(")")?;
        self.expect("{")?;
        let (mut tiers, mut default) = (vec![], None);
        loop {
            while self.eat(",") || self.eat(";") {}
            if self.eat("}") {
                break;
            }
            if default.is_some() {
                return self.expected("`}`: the default is the last tier");
            }
            if self.peek().is("default") && self.peek2().is(":") {
                self.bump();
                self.bump();
                default = Some(self.ident("the default's kernel")?);
                continue;
            }
            let cond = self.expr()?;
            self.expect(":")?;
            let kernel = self.ident("the tier's kernel")?;
            tiers.push((cond, kernel));
        }
        let span = at.to(self.toks[self.pos.saturating_sub(1)].span);
        Ok(TierDecl {
            name,
            var,
            tiers,
            default,
            span,
        })
    }

    /// `@param NAME = N` or `@param NAME = [a, b, ...]`.
    pub(super) fn param(&mut self) -> PR<ParamDecl> {
        let name = self.ident("a runtime parameter name")?;
        self.expect("=")?;
        let value = if self.eat("[") {
            ParamValue::Array(self.list("]", |p| p.int("an unsigned integer"))?)
        } else {
            let (n, s) = self.int("an unsigned integer or `[a, b, ...]`")?;
            ParamValue::Scalar(n, s)
        };
        Ok(ParamDecl { name, value })
    }

    pub(super) fn workload(&mut self) -> PR<Workload> {
        let level = self.level()?;
        let name = self.ident("a workload name")?;
        self.expect("(")?;
        let params = self.list(")", |p| {
            p.expect("%")?;
            let n = p.ident("a parameter name after `%`")?;
            p.expect(":")?;
            Ok((n, p.axis()?))
        })?;
        let body = self.block()?;
        Ok(Workload {
            name,
            level,
            params,
            body,
        })
    }

    pub(super) fn axis(&mut self) -> PR<Axis> {
        if self.eat("%") {
            return Ok(Axis::Ref(self.ident("a workload parameter name")?));
        }
        let kw = self.ident("an axis (`dense[N]`, `dense_dyn(n)`, `dense_dyn(lengths[row])`, `ragged(outer, lengths)`, `sparse(outer, indptr, indices)`, `sparse_row(row, indptr, indices)`, `tile(axis, size)` or a parameter)")?;
        let lower = kw.name.to_ascii_lowercase();
        match lower.as_str() {
            "dense" => {
                self.expect("[")?;
                let (n, s) = self.int("an extent")?;
                self.expect("]")?;
                Ok(Axis::Dense(n, s))
            }
            "dense_dyn" => {
                self.expect("(")?;
                let n = self.ident("a runtime parameter name")?;
                let axis = if self.eat("[") {
                    let row = self.expr()?;
                    self.expect("]")?;
                    Axis::RaggedRow(row, n)
                } else {
                    Axis::DenseDyn(n)
                };
                self.expect(")")?;
                Ok(axis)
            }
            "ragged" => {
                self.expect("(")?;
                let outer = self.expr()?;
                self.expect(",")?;
                let lens = self.ident("the name of a lengths array")?;
                self.expect(")")?;
                Ok(Axis::Ragged(outer, lens))
            }
            "sparse" | "sparse_row" => {
                let row_form = lower == "sparse_row";
                self.expect("(")?;
                let first = self.expr()?;
                self.expect(",")?;
                let indptr = self.ident("the name of an indptr array")?;
                self.expect(",")?;
                let indices = self.ident("the name of an indices array")?;
                self.expect(")")?;
                Ok(if row_form {
                    Axis::SparseRow(first, indptr, indices)
                } else {
                    Axis::Sparse(first, indptr, indices)
                })
            }
            "tile" if self.peek().is("(") => {
                self.expect("(")?;
                let base = self.axis()?;
                self.expect(",")?;
                let size = self.expr()?;
                let close = self.expect(")")?;
                Ok(Axis::Tile(Box::new(base), size, kw.span.to(close.span)))
            }
            _ => Ok(Axis::Ref(kw)),
        }
    }

    pub(super) fn block(&mut self) -> PR<Vec<Stmt>> {
        let open = self.expect("{")?;
        self.enter(open.span)?;
        let mut out = vec![];
        loop {
            if self.eat("}") {
                break;
            }
            // `;` or `,` may separate statements (PTO-WSP's printer writes `,` between the
            // statements of a `combine` and `;` after those of a `sequential`).
            if self.eat(";") || self.eat(",") {
                continue;
            }
            if self.peek().kind == Tok::Eof {
                return self.err(open.span, "this `{` is never closed");
            }
            out.push(self.stmt()?);
        }
        self.nesting -= 1;
        Ok(out)
    }

    pub(super) fn stmt(&mut self) -> PR<Stmt> {
        let kw = self.keyword("a statement (`parallel_for`, `for_each`, `select`, `cond`, `combine`, `sequential`, `dispatch`, `call`, `wait` or `task`)")?;
        let span = kw.span;
        let kind = match kw.name.as_str() {
            "parallel_for" | "for_each" | "select" => {
                let op = match kw.name.as_str() {
                    "parallel_for" => Opcode::PARALLEL_FOR,
                    "for_each" => Opcode::FOR_EACH,
                    _ => Opcode::SELECT,
                };
                let var = self.ident("a loop variable")?;
                self.expect("in")?;
                let axis = self.axis()?;
                let body = self.block()?;
                StmtK::Loop {
                    op,
                    var,
                    axis,
                    body,
                }
            }
            "cond" => {
                let pred = self.expr()?;
                let then = self.block()?;
                let els = if self.eat("else") {
                    if self.peek().is("cond") {
                        self.enter(span)?;
                        let s = self.stmt()?;
                        self.nesting -= 1;
                        Some(vec![s])
                    } else {
                        Some(self.block()?)
                    }
                } else {
                    None
                };
                StmtK::Cond { pred, then, els }
            }
            "combine" => StmtK::Combine(self.block()?),
            "sequential" => StmtK::Sequential(self.block()?),
            "dispatch" => {
                let start = self.peek().span;
                let pol = self.policy()?;
                let pspan = start.to(self.toks[self.pos.saturating_sub(1)].span);
                StmtK::Dispatch(pol, pspan, self.block()?)
            }
            "call" => {
                self.expect("@")?;
                let target = self.ident("the name of the workload to call")?;
                self.expect("(")?;
                let args = self.list(")", |p| p.ident("an argument (a name)"))?;
                StmtK::Call { target, args }
            }
            "wait" => {
                // `wait T <= bound`: a READBACK of tensor T (spec/pto.md §4.7).
                let tensor = self.ident("the tensor to read back")?;
                self.expect("<=")?;
                let bound = self.expr()?;
                StmtK::Wait { tensor, bound }
            }
            "task" => {
                self.expect("@")?;
                let kernel = self.ident("a kernel name")?;
                let selector = if self.eat("[") {
                    let e = self.expr()?;
                    self.expect("]")?;
                    Some(e)
                } else {
                    None
                };
                self.expect("(")?;
                let args = self.list(")", |p| p.expr())?;
                let mut resources = vec![];
                if self.eat("resources") {
                    self.expect("(")?;
                    resources = self.list(")", |p| p.resource())?;
                }
                StmtK::Task {
                    kernel,
                    selector,
                    args,
                    resources,
                }
            }
            other => return self.err(span, format!("unknown statement `{other}`")),
        };
        Ok(Stmt { kind, span })
    }

    pub(super) fn resource(&mut self) -> PR<Resource> {
        let name = self.ident("a resource (tensor) name")?;
        let mut dims = vec![];
        if self.eat("[") {
            loop {
                let start = self.expr()?;
                let end = if self.eat(":") {
                    Some(self.expr()?)
                } else {
                    None
                };
                dims.push(Dim { start, end });
                if self.list_end("]")? {
                    break;
                }
            }
        }
        let span = name.span.to(self.toks[self.pos.saturating_sub(1)].span);
        Ok(Resource { name, dims, span })
    }

    pub(super) fn policy(&mut self) -> PR<PolicyAst> {
        let kw = self.keyword("a dispatch policy (`round_robin`, `affinity(e)`, `hash(e)`, `dispatch_by(e)`, `work_steal`, `static(v)` or `threshold(...)`)")?;
        match kw.name.as_str() {
            "round_robin" => {
                if self.eat("(") {
                    let n = self.int("an AICPU count")?;
                    self.expect(")")?;
                    Ok(PolicyAst::RoundRobin(Some(n)))
                } else {
                    Ok(PolicyAst::RoundRobin(None))
                }
            }
            "affinity" | "hash" | "dispatch_by" => {
                self.expect("(")?;
                let e = self.expr()?;
                self.expect(")")?;
                Ok(if kw.name == "hash" {
                    PolicyAst::Hash(e)
                } else {
                    PolicyAst::Affinity(e)
                })
            }
            "work_steal" => Ok(PolicyAst::WorkSteal),
            "static" => {
                self.expect("(")?;
                let v = self.ident("a loop variable")?;
                self.expect(")")?;
                Ok(PolicyAst::Static(v))
            }
            "threshold" => {
                self.expect("(")?;
                let sel = self.expr()?;
                let mut levels = vec![];
                loop {
                    self.expect(",")?;
                    if self.peek().kind == Tok::Int {
                        let (t, s) = self.int("a threshold")?;
                        self.expect(":")?;
                        let p = self.policy()?;
                        levels.push((t, s, p));
                    } else {
                        let p = self.policy()?;
                        self.expect(")")?;
                        return Ok(PolicyAst::Threshold(sel, levels, Box::new(p)));
                    }
                }
            }
            other => self.err(kw.span, format!("unknown dispatch policy `{other}`")),
        }
    }

    pub(super) fn schedule(&mut self) -> PR<Schedule> {
        let level = self.level()?;
        let name = self.ident("a schedule name")?;
        self.expect("for")?;
        let workload = self.ident("the workload this schedule is for")?;
        let open = self.expect("{")?;
        let mut knobs = vec![];
        loop {
            if self.eat("}") {
                break;
            }
            if self.eat(";") || self.eat(",") {
                continue;
            }
            if self.peek().kind == Tok::Eof {
                return self.err(open.span, "this `{` is never closed");
            }
            let key = self.keyword("a schedule knob (`key = value`)")?;
            if key.name == "layout" {
                let value = self.layout()?;
                knobs.push(Knob { key, value });
                continue;
            }
            if matches!(key.name.as_str(), "order" | "affinity" | "prefetch") {
                let value = self.per_loop_knob(&key)?;
                knobs.push(Knob { key, value });
                continue;
            }
            self.expect("=")?;
            let value = match key.name.as_str() {
                "dispatch" => {
                    let start = self.peek().span;
                    let p = self.policy()?;
                    KnobValue::Dispatch(p, start.to(self.toks[self.pos - 1].span))
                }
                "streams" | "aicpus" | "window" | "pipeline_depth" | "workspace" => {
                    let (v, s) = self.int("an integer")?;
                    KnobValue::Int(v, s)
                }
                // PTO-WSP's printer writes `task_window = N tasks` and
                // `batch_deps = N range_compress`.
                "task_window" => {
                    let (v, s) = self.int("an integer")?;
                    if self.peek().kind == Tok::Ident && !self.peek2().is("=") {
                        let unit = self.keyword("a unit")?;
                        if unit.name != "tasks" {
                            return Err(self.rep.error(DiagKind::Type, unit.span, format!("ptovm's task window counts tasks; `{}` is not supported (write `task_window = N` or `N tasks`)", unit.name)));
                        }
                    }
                    KnobValue::Int(v, s)
                }
                "batch_deps" => {
                    let (v, s) = self.int("an integer")?;
                    if self.peek().kind == Tok::Ident && !self.peek2().is("=") {
                        let flag = self.keyword("`range_compress`")?;
                        if flag.name != "range_compress" {
                            return self.err(
                                flag.span,
                                format!(
                                    "expected `range_compress` or the next knob, found `{}`",
                                    flag.name
                                ),
                            );
                        }
                    }
                    KnobValue::Int(v, s)
                }
                "stream_by" => KnobValue::Expr(self.expr()?),
                "spatial_map" => {
                    let open = self.expect("(")?;
                    let grid = self.list(")", |p| p.int("a grid dimension"))?;
                    let span = open.span.to(self.toks[self.pos - 1].span);
                    KnobValue::SpatialMap(grid, span)
                }
                "timing" | "ready" | "start" | "window_mode" | "cores" => {
                    let (n, arg) = self.named_value()?;
                    KnobValue::Named(n, arg)
                }
                _ => {
                    self.skip_value();
                    KnobValue::Unknown
                }
            };
            knobs.push(Knob { key, value });
        }
        Ok(Schedule {
            name,
            level,
            workload,
            knobs,
            open: open.span,
        })
    }

    /// `order v = …`, `affinity v = …` or `prefetch v = N` after the key: a knob about the
    /// loops that bind `v` (spec/pto.md §4.6).
    pub(super) fn per_loop_knob(&mut self, key: &Ident) -> PR<KnobValue> {
        if self.peek().is("=") {
            let example = match key.name.as_str() {
                "order" => "order b = interleaved(4)",
                "affinity" => "affinity b = core_group",
                _ => "prefetch b = 1",
            };
            return self.err(
                key.span,
                format!(
                    "`{}` names the loop variable it applies to: write `{example}`",
                    key.name
                ),
            );
        }
        let var = self.ident("the loop variable this knob applies to")?;
        self.expect("=")?;
        if key.name == "prefetch" {
            let depth = self.int("a prefetch depth (an integer)")?;
            return Ok(KnobValue::PerLoop(var, None, Some(depth)));
        }
        let (value, arg) = self.named_value()?;
        Ok(KnobValue::PerLoop(var, Some(value), arg))
    }

    /// A knob's value `name` or `name(N)`.
    fn named_value(&mut self) -> PR<(Ident, Option<(u64, Span)>)> {
        let n = self.keyword("a value")?;
        let arg = if self.eat("(") {
            let a = self.int("an integer")?;
            self.expect(")")?;
            Some(a)
        } else {
            None
        };
        Ok((n, arg))
    }

    /// `layout T = (S(k), R, ...)` after the `layout` keyword.
    pub(super) fn layout(&mut self) -> PR<KnobValue> {
        let tensor = self.ident("a tensor name")?;
        self.expect("=")?;
        self.expect("(")?;
        let dims = self.list(")", |p| {
            let d = p.keyword("a layout dimension (`R` or `S(k)`)")?;
            match d.name.as_str() {
                "r" => Ok((None, d.span)),
                "s" => {
                    p.expect("(")?;
                    let k = p.int("a mesh axis")?;
                    let close = p.expect(")")?;
                    Ok((Some(k), d.span.to(close.span)))
                }
                other => p.err(
                    d.span,
                    format!("expected `R` or `S(k)` in a layout, found `{other}`"),
                ),
            }
        })?;
        Ok(KnobValue::Layout(tensor, dims))
    }

    /// Skips an unknown knob's value: balanced tokens up to `;`, `}` or the next `key =`.
    pub(super) fn skip_value(&mut self) {
        let mut depth = 0usize;
        loop {
            let t = self.peek();
            if t.kind == Tok::Eof {
                return;
            }
            if depth == 0
                && (t.is(";")
                    || t.is("}")
                    || (t.kind == Tok::Ident
                        && self.peek2().is("=")
                        && self.pos > 0
                        && !self.toks[self.pos - 1].is("=")))
            {
                return;
            }
            if t.is("(") || t.is("[") || t.is("{") {
                depth += 1;
            } else if (t.is(")") || t.is("]") || t.is("}")) && depth > 0 {
                depth -= 1;
            }
            self.bump();
        }
    }

    pub(super) fn tensor(&mut self) -> PR<TensorDecl> {
        let name = self.ident("a tensor name")?;
        self.expect(":")?;
        let dtype = self.keyword("an element type (f16, bf16, f32, ...)")?;
        self.expect("[")?;
        let dims = self.list("]", |p| {
            Ok(if p.peek().kind == Tok::Int {
                Ok(p.int("a dimension")?)
            } else {
                Err(p.ident("a dimension (an integer or a runtime parameter name)")?)
            })
        })?;
        Ok(TensorDecl { name, dtype, dims })
    }

    pub(super) fn kernel(&mut self) -> PR<KernelDecl> {
        let name = self.ident("a kernel name")?;
        self.expect("(")?;
        let params = self.list(")", |p| p.ident("a parameter name"))?;
        self.expect(":")?;
        let pool = self.keyword("a pool (`cube` or `vector`)")?;
        self.expect("(")?;
        let args = self.list(")", |p| {
            let dir = p.keyword("a direction (`in`, `out` or `inout`)")?;
            Ok((dir, p.ident("an argument name")?))
        })?;
        // `workspace(N)`: N bytes of scratch for each of its tasks while it runs; `cost(e)`:
        // how long each runs; `cores(N)`: how many run at once at most. Any order, each at
        // most once.
        let (mut workspace, mut cost, mut cores) = (None, None, None);
        loop {
            let t = self.peek();
            if t.is("workspace") && workspace.is_none() {
                self.pos += 1;
                self.expect("(")?;
                let n = self.int("the workspace's bytes")?;
                self.expect(")")?;
                workspace = Some(n);
            } else if t.is("cost") && cost.is_none() {
                self.pos += 1;
                self.expect("(")?;
                let expr = self.expr()?;
                let unit = if self.peek().is(",") {
                    self.pos += 1;
                    Some(self.ident("a unit (`ns` or `cycles`)")?)
                } else {
                    None
                };
                self.expect(")")?;
                cost = Some(CostDecl { expr, unit });
            } else if t.is("cores") && cores.is_none() {
                self.pos += 1;
                self.expect("(")?;
                let n = self.int("the most cores its tasks run on at once")?;
                self.expect(")")?;
                cores = Some(n);
            } else {
                break;
            }
        }
        Ok(KernelDecl {
            name,
            params,
            pool,
            args,
            workspace,
            cost,
            cores,
        })
    }
}

//! Names across `call`s: what a name means at a point of the workload, and `call @w(args)`
//! expanded inline with lexical scope. Also PTO-WSP's level rule.
//!
//! A called workload sees its own parameters and loop variables, not its caller's: each of its
//! parameters is an alias of the caller's argument, resolved where the call is written. So an
//! argument that names a caller's loop variable passes its value, one that names a caller's
//! workload parameter passes that axis, and any other name passes the runtime parameter of that
//! name. Runtime parameters, tensors and kernels are the module's, shared by every workload.

use super::*;
use ptovm_vm::Level;

/// The selected workload (frame 0) or a workload expanded by `call`.
pub(super) struct Frame<'a> {
    /// Where its loop variables start in `Lower::scope`.
    pub(super) base: usize,
    /// Its parameters by name.
    pub(super) params: HashMap<String, Binding<'a>>,
    /// The workload's name.
    pub(super) name: &'a str,
    /// The call (frame 0: the workload's name).
    pub(super) call: Span,
}

/// What a workload parameter stands for.
pub(super) enum Binding<'a> {
    /// A parameter of the selected workload: its declared axis.
    Declared(&'a Axis),
    /// A parameter of a called workload: the caller's argument, resolved in the caller's frame.
    Alias(&'a Ident, usize),
}

/// What a name means at a point of the workload.
pub(super) enum Meaning<'a> {
    /// The loop variable at this depth.
    Var(u32),
    /// The runtime parameter of this name; with `Some`, also a parameter axis of the selected
    /// workload (its declaration).
    Named(String, Option<&'a Axis>),
}

impl<'a> Lower<'a, '_, '_> {
    /// What `name` means in frame `frame`: one of its loop variables (the innermost of that
    /// name), one of its parameters (followed through aliases), or a runtime parameter.
    pub(super) fn resolve(&self, name: &str, frame: usize) -> Meaning<'a> {
        let f = &self.calls[frame];
        let end = self
            .calls
            .get(frame + 1)
            .map_or(self.scope.len(), |g| g.base);
        if let Some(d) = self.scope[f.base..end].iter().rposition(|v| v == name) {
            return Meaning::Var((f.base + d) as u32);
        }
        match f.params.get(name) {
            Some(Binding::Declared(a)) => Meaning::Named(name.to_string(), Some(a)),
            Some(Binding::Alias(id, g)) => self.resolve(&id.name, *g),
            None => Meaning::Named(name.to_string(), None),
        }
    }

    /// Whether a loop variable of the current frame is named `name` (a loop may not rebind
    /// one; a called workload may reuse its caller's names).
    pub(super) fn bound_here(&self, name: &str) -> bool {
        self.scope[self.calls[self.cur].base..]
            .iter()
            .any(|v| v == name)
    }

    /// " (`q` is bound by the call at line L)" when `name` is a parameter of the current
    /// frame that a `call` bound; empty otherwise. For error messages.
    pub(super) fn via_call(&self, name: &str) -> String {
        let f = &self.calls[self.cur];
        match f.params.get(name) {
            Some(Binding::Alias(arg, _)) => {
                format!(
                    " (`{name}` is bound to `{}` by the call of `{}` at line {})",
                    arg.name,
                    f.name,
                    self.line_of(f.call)
                )
            }
            _ => String::new(),
        }
    }

    /// The slot of runtime parameter `id` (through the current frame's aliases).
    pub(super) fn param_slot(&mut self, id: &Ident, kind: ParamKind) -> R<u16> {
        match self.resolve(&id.name, self.cur) {
            Meaning::Var(_) => Err(self.rep.error(
                DiagKind::Type,
                id.span,
                format!(
                    "`{}` is a loop variable, not a runtime {}{}",
                    id.name,
                    kind.name(),
                    self.via_call(&id.name)
                ),
            )),
            Meaning::Named(n, _) => self.slot(
                &Ident {
                    name: n,
                    span: id.span,
                },
                kind,
            ),
        }
    }

    /// `call @target(args)`: the callee's body lowered here, in a frame of its own.
    pub(super) fn call(&mut self, target: &'a Ident, args: &'a [Ident]) -> R<()> {
        let Some(callee) = self
            .ast
            .workloads
            .iter()
            .find(|w| w.name.name == target.name)
        else {
            return Err(self.rep.error(
                DiagKind::UnknownName,
                target.span,
                format!(
                    "call of unknown workload `{}` (the module has: {})",
                    target.name,
                    names(self.ast.workloads.iter().map(|w| &w.name.name))
                ),
            ));
        };
        if let Some(at) = self.calls.iter().position(|f| f.name == target.name) {
            let cycle: Vec<&str> = self.calls[at..]
                .iter()
                .map(|f| f.name)
                .chain([target.name.as_str()])
                .collect();
            return Err(self.rep.error(
                DiagKind::Recursion,
                target.span,
                format!(
                    "recursive call: {} (a call is expanded inline, so it cannot recurse)",
                    cycle.join(" -> ")
                ),
            ));
        }
        if self.calls.len() >= limits::MAX_NESTING {
            return Err(self.rep.error(
                DiagKind::Nesting,
                target.span,
                format!("calls nested deeper than {}", limits::MAX_NESTING),
            ));
        }
        if args.len() != callee.params.len() {
            return Err(self.rep.error(
                DiagKind::Arity,
                target.span,
                format!(
                    "workload `{}` takes {} parameter(s) but {} are given",
                    target.name,
                    callee.params.len(),
                    args.len()
                ),
            ));
        }
        let mut params = HashMap::new();
        for ((p, _), a) in callee.params.iter().zip(args) {
            if params
                .insert(p.name.clone(), Binding::Alias(a, self.cur))
                .is_some()
            {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    p.span,
                    format!("parameter `%{}` is already defined", p.name),
                ));
            }
        }
        let caller = self.cur;
        self.calls.push(Frame {
            base: self.scope.len(),
            params,
            name: &callee.name.name,
            call: target.span,
        });
        self.cur = self.calls.len() - 1;
        let r = self.stmts(&callee.body);
        self.calls.pop();
        self.cur = caller;
        r
    }
}

/// Loop variable name → depth over the whole expansion (calls followed), `None` for a name
/// bound at several depths: how a schedule's expressions find loop variables by name.
pub(super) fn collect_vars<'a>(
    ast: &'a ModuleAst,
    body: &'a [Stmt],
    depth: u32,
    out: &mut HashMap<String, Option<u32>>,
    stack: &mut Vec<&'a str>,
) {
    for s in body {
        match &s.kind {
            StmtK::Loop { var, body, .. } => {
                let e = out.entry(var.name.clone()).or_insert(Some(depth));
                if *e != Some(depth) {
                    *e = None;
                }
                collect_vars(ast, body, depth + 1, out, stack);
            }
            StmtK::Cond { then, els, .. } => {
                collect_vars(ast, then, depth, out, stack);
                if let Some(e) = els {
                    collect_vars(ast, e, depth, out, stack);
                }
            }
            StmtK::Combine(b) | StmtK::Sequential(b) | StmtK::Dispatch(_, _, b) => {
                collect_vars(ast, b, depth, out, stack)
            }
            StmtK::Call { target, .. } => {
                // A cycle or a missing callee is reported when the call is lowered.
                let callee = ast.workloads.iter().find(|w| w.name.name == target.name);
                if let Some(w) = callee {
                    if !stack.contains(&w.name.name.as_str()) && stack.len() < limits::MAX_NESTING {
                        stack.push(&w.name.name);
                        collect_vars(ast, &w.body, depth, out, stack);
                        stack.pop();
                    }
                }
            }
            StmtK::Task { .. } | StmtK::Wait { .. } => {}
        }
    }
}

/// PTO-WSP's level rule, over every workload of the module as PTO-WSP checks it: an NPU-level
/// workload (`@workload[npu]`) holds no `parallel_for`.
pub(super) fn check_levels(rep: &Reporter<'_>, ast: &ModuleAst) -> R<()> {
    fn find(body: &[Stmt]) -> Option<&Stmt> {
        body.iter().find_map(|s| match &s.kind {
            StmtK::Loop { op, .. } if *op == Opcode::PARALLEL_FOR => Some(s),
            StmtK::Loop { body, .. }
            | StmtK::Combine(body)
            | StmtK::Sequential(body)
            | StmtK::Dispatch(_, _, body) => find(body),
            StmtK::Cond { then, els, .. } => find(then).or_else(|| els.as_deref().and_then(find)),
            StmtK::Call { .. } | StmtK::Task { .. } | StmtK::Wait { .. } => None,
        })
    }
    for w in ast.workloads.iter().filter(|w| w.level == Level::Npu) {
        if let Some(s) = find(&w.body) {
            return Err(rep.error(
                DiagKind::Type,
                s.span,
                format!(
                    "`parallel_for` cannot appear in NPU-level workload `{}` (PTO-WSP's level rule): use `for_each`, or make the workload `@workload[cpu]`",
                    w.name.name
                ),
            ));
        }
    }
    Ok(())
}

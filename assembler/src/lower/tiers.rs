//! Tier sets (`@tiers`, spec/pto.md §4.5; PTO-WSP's `PTO_TIER_DEF`): kernel variants chosen by a
//! value, the first tier whose condition holds, else the default. A task that names a tier set
//! with its selector, `task @set[value](…)`, lowers to a chain of `COND` statements over the
//! tiers' conditions (the value replaced by the selector), each holding the task with that
//! tier's kernel and the tier's index in the `TASK`'s `tier` field, which the task's descriptor
//! carries to the kernel.

use super::*;
use crate::ast::{Resource, TierDecl};

/// The most tiers a set may have, its default included (its chain of `COND` statements nests
/// two statements deep per tier).
const MAX_TIERS: usize = 8;

impl<'a> Lower<'a, '_, '_> {
    /// Checks every tier set of the module: unique names that are not kernels', a default,
    /// at most [`MAX_TIERS`] tiers, declared kernels that all take the same parameters and
    /// resources; warns of a tier (or a default) that earlier tiers leave no value to.
    pub(super) fn tier_decls(&mut self) -> R<()> {
        let ast = self.ast;
        for d in &ast.tiers {
            if self.tier_sets.contains_key(&d.name.name)
                || self.kernel_ids.contains_key(&d.name.name)
            {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    d.name.span,
                    format!("`{}` is already a kernel or a tier set", d.name.name),
                ));
            }
            let Some(default) = &d.default else {
                return Err(self.rep.error(
                    DiagKind::Type,
                    d.span,
                    format!(
                        "tier set `{}` has no default: end it with `default: KERNEL` (a value no tier takes must still run a kernel)",
                        d.name.name
                    ),
                ));
            };
            if d.tiers.len() + 1 > MAX_TIERS {
                return Err(self.rep.error(
                    DiagKind::Limit,
                    d.tiers[MAX_TIERS - 1].1.span,
                    format!(
                        "tier set `{}` has more than {MAX_TIERS} tiers (its default included)",
                        d.name.name
                    ),
                ));
            }
            let kernels: Vec<&Ident> = d.tiers.iter().map(|t| &t.1).chain([default]).collect();
            let mut first: Option<&KernelDecl> = None;
            for k in kernels {
                let Some(&(_, Some(decl))) = self.kernel_ids.get(&k.name) else {
                    return Err(self.rep.error(
                        DiagKind::UnknownName,
                        k.span,
                        format!("kernel `{}` of tier set `{}` is not declared (`@kernel {}(…): cube|vector(…)`): the variants must take the same parameters and resources", k.name, d.name.name, k.name),
                    ));
                };
                match first {
                    None => first = Some(decl),
                    Some(f) => {
                        let dirs = |x: &KernelDecl| -> Vec<String> {
                            x.args
                                .iter()
                                .map(|(dir, _)| dir.name.to_ascii_lowercase())
                                .collect()
                        };
                        if f.params.len() != decl.params.len() || dirs(f) != dirs(decl) {
                            return Err(self.rep.error(
                                DiagKind::Arity,
                                k.span,
                                format!(
                                    "kernel `{}` takes {} parameter(s) and resources ({}), but `{}`, the tier set's first, takes {} and ({}): a task gives every variant the same ones",
                                    k.name,
                                    decl.params.len(),
                                    dirs(decl).join(", "),
                                    f.name.name,
                                    f.params.len(),
                                    dirs(f).join(", ")
                                ),
                            ));
                        }
                    }
                }
            }
            self.unreachable_tiers(d);
            self.tier_sets.insert(d.name.name.clone(), d);
        }
        Ok(())
    }

    /// Warns of each tier whose condition is a comparison of the value with a constant that
    /// the earlier such tiers already take whole (no value reaches it), and of a default after
    /// tiers that take every value. Other conditions are not analysed (a tier after one is
    /// not judged by it). Overlap alone is not warned of: first-match tiers overlap by design
    /// (`len <= 2048`, then `len <= 8192`).
    fn unreachable_tiers(&mut self, d: &TierDecl) {
        let mut taken: Vec<(i128, i128)> = vec![];
        for (i, (cond, kernel)) in d.tiers.iter().enumerate() {
            let Some(range) = comparison(cond, &d.var.name) else {
                continue;
            };
            if covers(&taken, range) {
                self.rep.warn(
                    DiagKind::NoEffect,
                    cond.span,
                    format!(
                        "tier {i} of `{}` ({}) is unreachable: the tiers before it take every value it would",
                        d.name.name, kernel.name
                    ),
                );
            }
            taken.push(range);
        }
        if let Some(k) = &d.default {
            if covers(&taken, (i64::MIN as i128, i64::MAX as i128)) {
                self.rep.warn(
                    DiagKind::NoEffect,
                    k.span,
                    format!(
                        "the default of `{}` ({}) is unreachable: the tiers take every value",
                        d.name.name, k.name
                    ),
                );
            }
        }
    }

    /// `task @set[selector](args) resources(…)`: the chain of tiers.
    pub(super) fn tiered_task(
        &mut self,
        s: &Stmt,
        set: &Ident,
        selector: &Expr,
        args: &[Expr],
        resources: &[Resource],
    ) -> R<()> {
        let Some(&d) = self.tier_sets.get(&set.name) else {
            let what = if self.kernel_ids.contains_key(&set.name) {
                format!(
                    "`{}` is a kernel, not a tier set: `task @{}(…)` names it without `[…]`",
                    set.name, set.name
                )
            } else {
                format!("unknown tier set `{}` (declare it with `@tiers {}(v) {{ cond: kernel … default: kernel }}`)", set.name, set.name)
            };
            return Err(self.rep.error(DiagKind::UnknownName, set.span, what));
        };
        // A reduction in the selector is refused here, located, like anywhere outside `@plan`.
        self.lower_bodies(selector, Ctx::Scope)?;
        self.tier(s, d, 0, selector, args, resources)
    }

    /// Tier `i` of `d` onwards: `cond c_i { task } else { tier i + 1 … }`, the default last.
    fn tier(
        &mut self,
        s: &Stmt,
        d: &'a TierDecl,
        i: usize,
        selector: &Expr,
        args: &[Expr],
        resources: &[Resource],
    ) -> R<()> {
        let Some((cond, kernel)) = d.tiers.get(i) else {
            let default = d.default.as_ref().unwrap_or(&d.name);
            return self.task(s, default, args, resources, i as u8);
        };
        self.open(s.span)?;
        self.tier_subst = Some((d.var.name.clone(), selector.clone()));
        let e = self.expr(cond, Ctx::Tier);
        self.tier_subst = None;
        let at = self.emit(Opcode::COND, COND_HAS_ELSE, e?, 0);
        self.task(s, kernel, args, resources, i as u8)?;
        self.patch_end(at, s.span)?;
        let at = self.emit(Opcode::SEQUENTIAL, 0, 1, 0);
        self.tier(s, d, i + 1, selector, args, resources)?;
        self.patch_end(at, s.span)?;
        self.frames -= 1;
        Ok(())
    }
}

/// The values of `v` for which `cond` holds when it is `v OP c` or `c OP v` with a constant
/// `c` (as a closed range over i64, possibly empty), else `None`.
fn comparison(cond: &Expr, v: &str) -> Option<(i128, i128)> {
    let ExprK::Bin(op, a, b) = &cond.kind else {
        return None;
    };
    let (op, c) = match (&a.kind, &b.kind) {
        (ExprK::Name(n), ExprK::Int(c)) if n == v => (*op, *c as i128),
        // `c OP v` is `v OP' c` with the comparison turned round.
        (ExprK::Int(c), ExprK::Name(n)) if n == v => (
            match *op {
                ExprOp::LT => ExprOp::GT,
                ExprOp::LE => ExprOp::GE,
                ExprOp::GT => ExprOp::LT,
                ExprOp::GE => ExprOp::LE,
                other => other,
            },
            *c as i128,
        ),
        _ => return None,
    };
    let (lo, hi) = (i64::MIN as i128, i64::MAX as i128);
    Some(match op {
        ExprOp::LT => (lo, c - 1),
        ExprOp::LE => (lo, c),
        ExprOp::GT => (c + 1, hi),
        ExprOp::GE => (c, hi),
        ExprOp::EQ => (c, c),
        _ => return None,
    })
}

/// Whether the union of `taken` holds every value of `range` (an empty range is held).
fn covers(taken: &[(i128, i128)], range: (i128, i128)) -> bool {
    let mut sorted = taken.to_vec();
    sorted.sort();
    let mut next = range.0;
    for (lo, hi) in sorted {
        if next > range.1 {
            break;
        }
        if lo <= next {
            next = next.max(hi + 1);
        }
    }
    next > range.1
}

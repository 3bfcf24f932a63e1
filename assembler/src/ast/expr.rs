//! Expressions: precedence climbing.

use super::parse::{Parser, PR};
use super::*;

impl<'s> Parser<'_, 's> {
    pub(super) fn expr(&mut self) -> PR<Expr> {
        self.expr_nesting += 1;
        if self.expr_nesting > MAX_EXPR_NESTING {
            let s = self.peek().span;
            return Err(self.rep.error(
                DiagKind::Nesting,
                s,
                format!("expression nested deeper than {MAX_EXPR_NESTING}"),
            ));
        }
        if self.expr_nesting == 1 {
            self.expr_nodes = 0;
        }
        let r = self.binary(0);
        self.expr_nesting -= 1;
        r
    }

    /// Counts one node of the current expression. An expression longer than the bytecode can
    /// hold is rejected here, which also bounds the tree (and every recursion over it).
    pub(super) fn node(&mut self, span: Span) -> PR<()> {
        self.expr_nodes += 1;
        if self.expr_nodes >= limits::MAX_EXPR_LEN {
            return Err(self.rep.error(
                DiagKind::Limit,
                span,
                format!(
                    "expression too long: more than {} operators and operands (the bytecode limit is {} nodes)",
                    limits::MAX_EXPR_LEN - 1,
                    limits::MAX_EXPR_LEN
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn binop(t: &Token<'_>) -> Option<(ExprOp, u8)> {
        if t.kind != Tok::Punct {
            return None;
        }
        Some(match t.text {
            "||" => (ExprOp::OR, 1),
            "&&" => (ExprOp::AND, 2),
            "==" => (ExprOp::EQ, 3),
            "!=" => (ExprOp::NE, 3),
            "<" => (ExprOp::LT, 4),
            "<=" => (ExprOp::LE, 4),
            ">" => (ExprOp::GT, 4),
            ">=" => (ExprOp::GE, 4),
            "+" => (ExprOp::ADD, 5),
            "-" => (ExprOp::SUB, 5),
            "*" => (ExprOp::MUL, 6),
            "/" => (ExprOp::DIV, 6),
            "%" => (ExprOp::MOD, 6),
            _ => return None,
        })
    }

    pub(super) fn binary(&mut self, min: u8) -> PR<Expr> {
        let mut lhs = self.unary()?;
        // Left-associative loop: iteration, not recursion, per operator at one level.
        while let Some((op, prec)) = Self::binop(&self.peek()) {
            if prec <= min {
                break;
            }
            let t = self.bump();
            self.node(t.span)?;
            self.expr_nesting += 1;
            if self.expr_nesting > MAX_EXPR_NESTING {
                let s = self.peek().span;
                return Err(self.rep.error(
                    DiagKind::Nesting,
                    s,
                    format!("expression nested deeper than {MAX_EXPR_NESTING}"),
                ));
            }
            let rhs = self.binary(prec);
            self.expr_nesting -= 1;
            let rhs = rhs?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprK::Bin(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        Ok(lhs)
    }

    pub(super) fn unary(&mut self) -> PR<Expr> {
        let t = self.peek();
        if t.is("-") || t.is("!") {
            self.bump();
            self.node(t.span)?;
            self.expr_nesting += 1;
            if self.expr_nesting > MAX_EXPR_NESTING {
                return Err(self.rep.error(
                    DiagKind::Nesting,
                    t.span,
                    format!("expression nested deeper than {MAX_EXPR_NESTING}"),
                ));
            }
            let e = self.unary();
            self.expr_nesting -= 1;
            let e = e?;
            let op = if t.is("-") { ExprOp::NEG } else { ExprOp::NOT };
            let span = t.span.to(e.span);
            return Ok(Expr {
                kind: ExprK::Un(op, Box::new(e)),
                span,
            });
        }
        self.primary()
    }

    pub(super) fn primary(&mut self) -> PR<Expr> {
        let t = self.peek();
        match t.kind {
            Tok::Int => {
                let (v, span) = self.int("an integer")?;
                self.node(span)?;
                Ok(Expr {
                    kind: ExprK::Int(v),
                    span,
                })
            }
            Tok::Ident => {
                self.bump();
                self.node(t.span)?;
                let lower = t.text.to_ascii_lowercase();
                let binder = match lower.as_str() {
                    "sum" => Some(ExprOp::SUM),
                    "max" => Some(ExprOp::MAXOF),
                    "min" => Some(ExprOp::MINOF),
                    "search" => Some(ExprOp::SEARCH),
                    _ => None,
                };
                // `max(v in lo .. hi: body)`: a name and `in` after the parenthesis.
                if let Some(op) = binder.filter(|_| {
                    self.peek().is("(") && self.peek2().kind == Tok::Ident && {
                        let third = self.toks[(self.pos + 2).min(self.toks.len() - 1)];
                        third.is("in")
                    }
                }) {
                    return self.binder(op, t);
                }
                if let ("size" | "extent", true) = (lower.as_str(), self.peek().is("(")) {
                    self.bump();
                    let arg = self.ident("a kernel argument's name")?;
                    let dim = if lower == "extent" {
                        self.expect(",")?;
                        Some(self.int("a dimension")?)
                    } else {
                        None
                    };
                    let close = self.expect(")")?;
                    return Ok(Expr {
                        kind: ExprK::RegionSize(arg, dim),
                        span: t.span.to(close.span),
                    });
                }
                if let ("tile_start" | "tile_end", true) = (lower.as_str(), self.peek().is("(")) {
                    self.bump();
                    let var = self.ident("a `tile(…)` loop's variable")?;
                    let close = self.expect(")")?;
                    return Ok(Expr {
                        kind: ExprK::TileBound(lower == "tile_end", var),
                        span: t.span.to(close.span),
                    });
                }
                let fun = match lower.as_str() {
                    "min" => Some(ExprOp::MIN),
                    "max" => Some(ExprOp::MAX),
                    "ceil_div" => Some(ExprOp::CEILDIV),
                    _ => None,
                };
                if let (Some(op), true) = (fun, self.peek().is("(")) {
                    self.bump();
                    let a = self.expr()?;
                    self.expect(",")?;
                    let b = self.expr()?;
                    let close = self.expect(")")?;
                    return Ok(Expr {
                        kind: ExprK::Bin(op, Box::new(a), Box::new(b)),
                        span: t.span.to(close.span),
                    });
                }
                if self.eat("[") {
                    let i = self.expr()?;
                    let close = self.expect("]")?;
                    let id = Ident {
                        name: t.text.to_string(),
                        span: t.span,
                    };
                    return Ok(Expr {
                        kind: ExprK::Elem(id, Box::new(i)),
                        span: t.span.to(close.span),
                    });
                }
                Ok(Expr {
                    kind: ExprK::Name(t.text.to_string()),
                    span: t.span,
                })
            }
            _ if t.is("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            _ => self.expected("an expression"),
        }
    }

    /// The rest of `op(v in lo .. hi: body)` (or `lo ..= hi`) after the name `t`.
    fn binder(&mut self, op: ExprOp, t: Token<'s>) -> PR<Expr> {
        self.expect("(")?;
        let var = self.ident("the reduction's variable")?;
        self.keyword("`in`")?;
        let lo = self.expr()?;
        let inclusive = if self.eat("..=") {
            true
        } else {
            self.expect("..")?;
            false
        };
        let mut hi = self.expr()?;
        if inclusive {
            self.node(hi.span)?;
            let span = hi.span;
            hi = Expr {
                kind: ExprK::Bin(
                    ExprOp::ADD,
                    Box::new(hi),
                    Box::new(Expr {
                        kind: ExprK::Int(1),
                        span,
                    }),
                ),
                span,
            };
        }
        self.expect(":")?;
        let body = self.expr()?;
        let close = self.expect(")")?;
        Ok(Expr {
            kind: ExprK::Bind(op, var, Box::new(lo), Box::new(hi), Box::new(body)),
            span: t.span.to(close.span),
        })
    }
}

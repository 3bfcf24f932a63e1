//! Tokens of `.pto` text, recognised with `nom`. Both front ends share it: the module language
//! and the listing (disassembly) format.

use nom::branch::alt;
use nom::bytes::complete::{tag, take_while, take_while1};
use nom::character::complete::{char, one_of, satisfy};
use nom::combinator::{map, recognize};
use nom::sequence::pair;
use nom::{IResult, Parser};

use crate::diag::{AsmError, DiagKind, Reporter, Span};

/// Token kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident,
    /// A decimal or `0x` hexadecimal integer literal.
    Int,
    /// Punctuation or an operator (the text says which).
    Punct,
    /// End of a line (significant only in listings).
    Newline,
    /// End of input.
    Eof,
}

/// A token and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'s> {
    /// Kind.
    pub kind: Tok,
    /// Source text.
    pub text: &'s str,
    /// Location.
    pub span: Span,
}

impl Token<'_> {
    /// Whether this is the punctuation or keyword `s`.
    pub fn is(&self, s: &str) -> bool {
        matches!(self.kind, Tok::Punct | Tok::Ident) && self.text == s
    }
}

fn ident(i: &str) -> IResult<&str, &str> {
    recognize(pair(
        satisfy(|c| c.is_ascii_alphabetic() || c == '_'),
        take_while(|c: char| c.is_ascii_alphanumeric() || c == '_'),
    ))
    .parse(i)
}

fn int(i: &str) -> IResult<&str, &str> {
    alt((
        recognize(pair(
            tag("0x"),
            take_while1(|c: char| c.is_ascii_hexdigit()),
        )),
        take_while1(|c: char| c.is_ascii_digit()),
    ))
    .parse(i)
}

fn punct(i: &str) -> IResult<&str, &str> {
    alt((
        alt((
            tag("->"),
            tag("<="),
            tag(">="),
            tag("=="),
            tag("!="),
            tag("&&"),
            tag("||"),
        )),
        recognize(one_of("{}()[],:;=<>+-*/%!@.$")),
    ))
    .parse(i)
}

fn token(i: &str) -> IResult<&str, (Tok, &str)> {
    alt((
        map(int, |t| (Tok::Int, t)),
        map(ident, |t| (Tok::Ident, t)),
        map(punct, |t| (Tok::Punct, t)),
        map(char('\n'), |_| (Tok::Newline, "\n")),
    ))
    .parse(i)
}

/// Splits `src` (which starts at byte `base` of the file) into tokens. Comments run from `//`
/// or `#` to the end of the line. Newlines are kept as tokens when `newlines` is set.
pub fn lex<'s>(
    rep: &Reporter<'s>,
    src: &'s str,
    base: usize,
    newlines: bool,
) -> Result<Vec<Token<'s>>, AsmError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let len = src.len();
    while pos < len {
        let rest = &src[pos..];
        let c = rest.as_bytes()[0];
        if c == b'\n' {
            if newlines {
                out.push(Token {
                    kind: Tok::Newline,
                    text: "\n",
                    span: Span::new(base + pos, base + pos + 1),
                });
            }
            pos += 1;
            continue;
        }
        if c == b' ' || c == b'\t' || c == b'\r' {
            pos += 1;
            continue;
        }
        if rest.starts_with("//") || c == b'#' {
            pos += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        match token(rest) {
            Ok((remaining, (kind, text))) => {
                let start = base + pos;
                pos = len - remaining.len();
                out.push(Token {
                    kind,
                    text,
                    span: Span::new(start, base + pos),
                });
            }
            Err(_) => {
                let ch = rest.chars().next().unwrap_or('?');
                return Err(rep.error(
                    DiagKind::Syntax,
                    Span::new(base + pos, base + pos + ch.len_utf8()),
                    format!("unexpected character {ch:?}"),
                ));
            }
        }
    }
    out.push(Token {
        kind: Tok::Eof,
        text: "",
        span: Span::new(base + len, base + len),
    });
    Ok(out)
}

/// Parses an integer literal token (decimal or `0x` hex) into a u64; `None` on overflow.
pub fn int_value(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse::<u64>().ok(),
    }
}

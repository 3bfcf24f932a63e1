//! Tokens of `.pto` module text, recognised with `nom`. (The listing format is line-based and
//! split on whitespace by its own parser.)

use nom::branch::alt;
use nom::bytes::complete::{tag, take_while, take_while1};
use nom::character::complete::{one_of, satisfy};
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
    /// A `"…"` string literal (PTO-WSP's module header); the text includes the quotes.
    Str,
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
    /// Whether this is the punctuation or keyword `s`. Keywords match in any case, as in
    /// PTO-WSP (`Dense[8]`, `PARALLEL_FOR`): `s` is given in lower case.
    pub fn is(&self, s: &str) -> bool {
        match self.kind {
            Tok::Punct => self.text == s,
            Tok::Ident => self.text.eq_ignore_ascii_case(s),
            _ => false,
        }
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
            tag("..="),
            tag(".."),
            tag("<="),
            tag(">="),
            tag("=="),
            tag("!="),
            tag("&&"),
            tag("||"),
        )),
        recognize(one_of("{}()[],:;=<>+-*/%!@|")),
    ))
    .parse(i)
}

/// A string literal: `"` up to the next `"` not escaped by `\`, on one line.
fn string(i: &str) -> IResult<&str, &str> {
    let err = || nom::Err::Error(nom::error::Error::new(i, nom::error::ErrorKind::Char));
    let body = i.strip_prefix('"').ok_or_else(err)?;
    let mut escaped = false;
    for (at, c) in body.char_indices() {
        match c {
            '\n' => break,
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Ok((&body[at + 1..], &i[..at + 2])),
            _ => escaped = false,
        }
    }
    Err(err())
}

/// The value of a string literal token: the text between the quotes with PTO-WSP's escapes
/// (`\n`, `\t`, `\r`, `\\`, `\"`; any other escaped character stands for itself).
pub fn string_value(text: &str) -> String {
    let inner = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn token(i: &str) -> IResult<&str, (Tok, &str)> {
    alt((
        map(int, |t| (Tok::Int, t)),
        map(ident, |t| (Tok::Ident, t)),
        map(punct, |t| (Tok::Punct, t)),
        map(string, |t| (Tok::Str, t)),
    ))
    .parse(i)
}

/// Splits `src` into tokens; whitespace and newlines separate tokens. Comments run from `//` or
/// `#` to the end of the line.
pub fn lex<'s>(rep: &Reporter<'s>, src: &'s str) -> Result<Vec<Token<'s>>, AsmError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let len = src.len();
    while pos < len {
        let rest = &src[pos..];
        let c = rest.as_bytes()[0];
        if c == b' ' || c == b'\t' || c == b'\r' || c == b'\n' {
            pos += 1;
            continue;
        }
        if rest.starts_with("//") || c == b'#' {
            pos += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        match token(rest) {
            Ok((remaining, (kind, text))) => {
                let start = pos;
                pos = len - remaining.len();
                out.push(Token {
                    kind,
                    text,
                    span: Span::new(start, pos),
                });
            }
            Err(_) if c == b'"' => {
                let end = rest.find('\n').unwrap_or(rest.len());
                return Err(rep.error(
                    DiagKind::Syntax,
                    Span::new(pos, pos + end),
                    "unterminated string: a closing `\"` is missing on this line",
                ));
            }
            Err(_) => {
                let ch = rest.chars().next().unwrap_or('?');
                return Err(rep.error(
                    DiagKind::Syntax,
                    Span::new(pos, pos + ch.len_utf8()),
                    format!("unexpected character {ch:?}"),
                ));
            }
        }
    }
    out.push(Token {
        kind: Tok::Eof,
        text: "",
        span: Span::new(len, len),
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

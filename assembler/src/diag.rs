//! Diagnostics: every assembler error and warning names the file, line and column and shows the
//! source line with a caret under the offending text.

use std::fmt;

/// Error or warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The input is rejected.
    Error,
    /// The input is accepted; something deserves attention.
    Warning,
}

/// A byte range in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte (≥ start).
    pub end: usize,
}

impl Span {
    /// A span.
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start,
            end: end.max(start),
        }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// What kind of problem (one per check of spec/pto.md §6), so tests and tools can match on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiagKind {
    /// A character or token the grammar does not allow here.
    Syntax,
    /// A name that is not defined.
    UnknownName,
    /// A name defined twice.
    DuplicateName,
    /// Wrong number of parameters or resources for a kernel.
    Arity,
    /// A value of the wrong kind (scalar vs array, axis kind, knob value).
    Type,
    /// Statements or loops nested deeper than the limit.
    Nesting,
    /// A `call` cycle: a workload that calls itself, directly or through others.
    Recursion,
    /// An integer that does not fit where it goes.
    Overflow,
    /// A table or count of the program exceeds a limit of the format.
    Limit,
    /// Listing text whose record is not valid.
    Listing,
    /// The assembled program failed verification (reported with the verifier's message).
    Verify,
    /// A kernel used without a declaration (warning).
    UndeclaredKernel,
    /// A resource used without a tensor declaration (warning).
    UndeclaredTensor,
    /// A schedule knob ptovm does not know (warning).
    UnknownKnob,
    /// A declaration or setting with no effect: a runtime parameter declared but never used,
    /// a module-header line given again (warning).
    NoEffect,
}

/// One error or warning with its location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Kind.
    pub kind: DiagKind,
    /// Message.
    pub message: String,
    /// File name as given.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    /// The source line.
    pub source_line: String,
    /// Caret length (characters, ≥ 1).
    pub width: usize,
}

impl Diagnostic {
    /// Builds a diagnostic for `span` of `src`.
    pub fn new(
        severity: Severity,
        kind: DiagKind,
        message: impl Into<String>,
        file: &str,
        src: &str,
        span: Span,
    ) -> Diagnostic {
        let start = floor_char(src, span.start.min(src.len()));
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line = src[..start].matches('\n').count() + 1;
        let col = src[line_start..start].chars().count() + 1;
        let end = floor_char(src, span.end.min(line_end).max(start));
        let width = src[start..end].chars().count().max(1);
        // A CRLF line is shown without its CR; a position on or past the CR (the end of the
        // input, say) is shown just past the line's last character.
        let source_line = src[line_start..line_end].trim_end_matches('\r').to_string();
        let col = col.min(source_line.chars().count() + 1);
        Diagnostic {
            severity,
            kind,
            message: message.into(),
            file: file.to_string(),
            line,
            col,
            source_line,
            width,
        }
    }

    /// The first line alone: `file:line:col: error: message`.
    pub fn headline(&self) -> String {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        format!(
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.col, sev, self.message
        )
    }
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = self.line.to_string();
        let pad = " ".repeat(num.len());
        // Tabs are shown as single spaces so the caret lines up.
        let shown: String = self
            .source_line
            .chars()
            .map(|c| if c == '\t' { ' ' } else { c })
            .collect();
        writeln!(f, "{}", self.headline())?;
        writeln!(f, "{pad} |")?;
        writeln!(f, "{num} | {shown}")?;
        write!(
            f,
            "{pad} | {}{}",
            " ".repeat(self.col - 1),
            "^".repeat(self.width)
        )
    }
}

/// An assembly failure: the first error found (later ones would likely be consequences).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AsmError(pub Box<Diagnostic>);

impl AsmError {
    /// The diagnostic.
    pub fn diag(&self) -> &Diagnostic {
        &self.0
    }
}

/// Builds errors and collects warnings for one source file.
#[derive(Clone, Debug)]
pub struct Reporter<'s> {
    /// File name.
    pub file: &'s str,
    /// Source text.
    pub src: &'s str,
    /// Warnings so far.
    pub warnings: Vec<Diagnostic>,
}

impl<'s> Reporter<'s> {
    /// A reporter for `src` named `file`.
    pub fn new(file: &'s str, src: &'s str) -> Reporter<'s> {
        Reporter {
            file,
            src,
            warnings: vec![],
        }
    }
    /// An error at `span`.
    pub fn error(&self, kind: DiagKind, span: Span, msg: impl Into<String>) -> AsmError {
        AsmError(Box::new(Diagnostic::new(
            Severity::Error,
            kind,
            msg,
            self.file,
            self.src,
            span,
        )))
    }
    /// Records a warning at `span`.
    pub fn warn(&mut self, kind: DiagKind, span: Span, msg: impl Into<String>) {
        self.warnings.push(Diagnostic::new(
            Severity::Warning,
            kind,
            msg,
            self.file,
            self.src,
            span,
        ));
    }
}

//! What an operation counts and traces (the crate docs' "Observability"): its count when it
//! is made, its failure when refused at once, and its `rsm::op` span.

use super::ImportSegment;
use crate::Error;
use crate::reactor::Op;
use crate::stats::OpKind;

impl ImportSegment {
    /// The operation `make` builds, counted as a `kind` made to move `len` bytes at `offset`
    /// and given its span. The count and the span are taken before the operation exists,
    /// so that it is built in place: set afterwards, every operation would be moved once
    /// more, a copy of its bytes.
    #[inline(always)]
    pub(super) fn observed<B: Send + 'static>(
        &self,
        kind: OpKind,
        offset: u64,
        len: usize,
        make: impl FnOnce() -> Op<B>,
    ) -> Op<B> {
        self.count_made(kind, len);
        let span = self.op_span(kind, offset, len);
        let mut op = make();
        if let Some(span) = span {
            op.trace(span);
        }
        op
    }

    /// Counts a `kind` made to move `len` bytes.
    #[inline(always)]
    pub(super) fn count_made(&self, kind: OpKind, len: usize) {
        crate::stats::made(self.inner.stats_id, kind, len);
    }

    /// Counts a `kind` that failed with `e`.
    #[cold]
    pub(super) fn count_failure(&self, kind: OpKind, e: &Error) {
        crate::stats::failed(self.inner.stats_id, kind, e);
    }

    /// An operation refused when made: `e`, counted as the failure of the operation named
    /// `op` (`put`, `getv`).
    #[cold]
    pub(super) fn refused<B: Send + 'static>(&self, op: &str, e: Error, buf: B) -> Op<B> {
        if let Some(kind) = OpKind::of_op(op) {
            self.count_failure(kind, &e);
        }
        Op::failed(e, buf)
    }

    /// The span of an operation (`rsm::op`, trace level, under the connection's), if a
    /// subscriber wants it: one load and a comparison when none does.
    #[inline(always)]
    pub(super) fn op_span(
        &self,
        kind: OpKind,
        offset: u64,
        len: usize,
    ) -> Option<Box<tracing::Span>> {
        if tracing::level_filters::LevelFilter::current() < tracing::Level::TRACE {
            return None;
        }
        op_span(&self.inner.span, kind, offset, len)
    }
}

/// Out of line: its code would otherwise grow every operation's constructor.
#[cold]
#[inline(never)]
fn op_span(
    parent: &tracing::Span,
    kind: OpKind,
    offset: u64,
    len: usize,
) -> Option<Box<tracing::Span>> {
    let span = tracing::trace_span!(
        target: "rsm::op",
        parent: parent,
        "op",
        kind = kind.name(),
        offset,
        len
    );
    (!span.is_disabled()).then(|| Box::new(span))
}

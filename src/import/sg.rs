//! Scatter/gather (docs/rsmapi.md §4.5, DESIGN.md, decision 17): `putv` gathers local pieces into the segment,
//! `getv` scatters the segment into local pieces. Entries are validated in order first; the
//! valid ones before the first invalid one go out in batches within the provider's iov
//! limits (on a fabric controller, cut in `backend/fabric/import/batch.rs`), not one round
//! trip per entry.

use super::ImportSegment;
use crate::backend::path::{ImportPath, Way};
use crate::events::SignalFlags;
use crate::local::LocalMemory;
use crate::perm::Perm;
use crate::reactor::slot::{Outcome, Piece};
use crate::reactor::{IoBuf, IoBufMut, Op};
use crate::{Error, Result};
use std::future::Future;
use std::ops::BitOr;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `RSM_MAX_SGIOREQS`: the most entries one vector holds.
pub const MAX_SGIOREQS: usize = 16;

/// The local side of a scatter/gather entry: a registered handle, or a buffer the operation
/// owns until it completes.
#[derive(Debug)]
pub enum SgLocal<B> {
    /// `RSM_HANDLE_TYPE`: memory registered once ([`crate::Controller::local_memory`]).
    Handle(LocalMemory),
    /// `RSM_VA_TYPE`: an owned buffer, given back with the outcome.
    Buffer(B),
}

/// One entry of a vector (`rsm_iovec_t`): `len` bytes between the local side at
/// `local_offset` and the segment at `remote_offset`.
///
/// ```
/// use rsm::SgEntry;
/// let e = SgEntry::buffer(vec![7u8; 64], 4096);
/// assert_eq!((e.local_offset, e.remote_offset, e.len), (0, 4096, 64));
/// ```
#[derive(Debug)]
pub struct SgEntry<B> {
    /// The local memory.
    pub local: SgLocal<B>,
    /// Where in the local memory the entry starts.
    pub local_offset: usize,
    /// Where in the segment the entry starts.
    pub remote_offset: u64,
    /// The bytes the entry moves.
    pub len: usize,
}

impl<B: IoBuf> SgEntry<B> {
    /// The whole of `buf`, to or from the segment at `remote_offset`.
    pub fn buffer(buf: B, remote_offset: u64) -> Self {
        let len = buf.bytes_len();
        SgEntry {
            local: SgLocal::Buffer(buf),
            local_offset: 0,
            remote_offset,
            len,
        }
    }
}

impl<B> SgEntry<B> {
    /// `len` bytes of a local memory handle at `local_offset`.
    pub fn handle(mem: &LocalMemory, local_offset: usize, remote_offset: u64, len: usize) -> Self {
        SgEntry {
            local: SgLocal::Handle(mem.clone()),
            local_offset,
            remote_offset,
            len,
        }
    }

    /// The entry's buffer, if it has one.
    pub fn into_buffer(self) -> Option<B> {
        match self.local {
            SgLocal::Buffer(b) => Some(b),
            SgLocal::Handle(_) => None,
        }
    }
}

/// Flags of a vector (`rsm_scat_gath_t.flags`).
///
/// ```
/// use rsm::SgFlags;
/// let f = SgFlags::IMPLICIT_SIGPOST | SgFlags::SIGPOST_NO_ACCUMULATE;
/// assert_eq!(f.bits(), 0x03);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct SgFlags(u32);

impl SgFlags {
    /// `RSM_IMPLICIT_SIGPOST`: signal the exporter after the whole vector succeeded.
    pub const IMPLICIT_SIGPOST: SgFlags = SgFlags(0x01);
    /// `RSM_SIGPOST_NO_ACCUMULATE`, passed on to that signal.
    pub const SIGPOST_NO_ACCUMULATE: SgFlags = SgFlags(0x02);

    /// No flag.
    pub const fn empty() -> SgFlags {
        SgFlags(0)
    }

    /// The flags with these bits (unknown bits are ignored).
    pub const fn from_bits(bits: u32) -> SgFlags {
        SgFlags(bits & 0x03)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: SgFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for SgFlags {
    type Output = SgFlags;
    fn bitor(self, rhs: SgFlags) -> SgFlags {
        SgFlags(self.0 | rhs.0)
    }
}

/// How a vector ended.
#[derive(Debug)]
pub struct SgOutcome<B> {
    /// `Ok` when every entry was transferred; else the error of the first entry that was
    /// not (its validation error, or the failure of the batch it went out in).
    pub result: Result<()>,
    /// `io_residual_count`: the entries not transferred, from the first failed or invalid
    /// one to the end (0 on success; DESIGN.md, decision 17).
    pub residual: usize,
    /// The entries, with their buffers, once the provider is done with them (`None` when
    /// the operation was failed early while the provider still held them).
    pub entries: Option<Vec<SgEntry<B>>>,
}

/// The future of a `putv` or `getv`.
///
/// # Cancel safety
/// As for [`Op`]: dropping it stops the waiting, not the transfers already posted; the
/// entries' buffers and handles stay with the operation until the provider is done.
#[must_use = "a vector does nothing until polled"]
pub struct SgOp<B: Send + 'static> {
    op: Option<Op<Vec<SgEntry<B>>>>,
    count: usize,
    /// The first invalid entry and its error; entries before it are transferred.
    invalid: Option<(usize, Error)>,
    flags: SgFlags,
    /// The segment, for `IMPLICIT_SIGPOST` (a putv's signal after the whole vector).
    signal_to: Option<ImportSegment>,
    /// The implicit signal being posted, with the vector's entries to give back after it.
    signalling: Option<(SignalPost, Option<Vec<SgEntry<B>>>)>,
}

type SignalPost = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

impl<B: Send + 'static> std::fmt::Debug for SgOp<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SgOp")
            .field("count", &self.count)
            .field("flags", &self.flags)
            .finish()
    }
}

impl<B: Send + 'static> Unpin for SgOp<B> {}

impl<B: Send + 'static> Future for SgOp<B> {
    type Output = SgOutcome<B>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SgOutcome<B>> {
        if let Some((post, _)) = self.signalling.as_mut() {
            let res = std::task::ready!(post.as_mut().poll(cx));
            let entries = self.signalling.take().and_then(|(_, e)| e);
            // The data moved; a failed signal is the vector's error, with no residual.
            return Poll::Ready(SgOutcome {
                result: res,
                residual: 0,
                entries,
            });
        }
        let Some(op) = self.op.as_mut() else {
            return Poll::Ready(SgOutcome {
                result: Err(Error::bad_sgio().detail("vector polled after completion")),
                residual: self.count,
                entries: None,
            });
        };
        let Outcome {
            result,
            buf,
            failed_entry,
        } = std::task::ready!(op.poll_outcome(cx));
        self.op = None;
        let count = self.count;
        let (result, residual) = match (result, self.invalid.take()) {
            (Err(e), _) => (Err(e), count - failed_entry.unwrap_or(0).min(count)),
            (Ok(()), Some((i, e))) => (Err(e), count - i),
            (Ok(()), None) => (Ok(()), 0),
        };
        if result.is_ok() && self.flags.contains(SgFlags::IMPLICIT_SIGPOST) {
            if let Some(seg) = self.signal_to.take() {
                let flags = sig_flags(self.flags);
                let post: SignalPost =
                    Box::pin(async move { seg.post_signal(flags, "putv").await });
                self.signalling = Some((post, buf));
                return self.poll(cx);
            }
        }
        Poll::Ready(SgOutcome {
            result,
            residual,
            entries: buf,
        })
    }
}

/// The signal's flags of a putv's `IMPLICIT_SIGPOST`.
fn sig_flags(flags: SgFlags) -> SignalFlags {
    if flags.contains(SgFlags::SIGPOST_NO_ACCUMULATE) {
        SignalFlags::NO_ACCUMULATE
    } else {
        SignalFlags::empty()
    }
}

impl ImportSegment {
    /// The segment to signal after a putv asking for `IMPLICIT_SIGPOST` (docs/rsmapi.md §4.5; a getv
    /// posts none).
    fn implicit_signal(&self, way: Way, flags: SgFlags) -> Option<ImportSegment> {
        (way == Way::Put && flags.contains(SgFlags::IMPLICIT_SIGPOST)).then(|| self.clone())
    }
}

impl ImportSegment {
    /// Gathers the entries' local pieces into the segment (`rsm_memseg_import_putv`) and
    /// resolves when all of them are visible at the target.
    ///
    /// Entries are checked in order first; those before the first invalid one are
    /// transferred and the outcome carries the invalid entry's error and the residual count
    /// (DESIGN.md, decision 17). Zero entries or more than 16 are `RSMERR_BAD_SGIO`.
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ImportSegment, mem: rsm::LocalMemory) {
    /// use rsm::{SgEntry, SgFlags};
    /// let v = vec![
    ///     SgEntry::handle(&mem, 0, 0, 512),
    ///     SgEntry::buffer(bytes::Bytes::from_static(b"tail"), 4096),
    /// ];
    /// let out = seg.putv(v, SgFlags::empty()).await;
    /// assert_eq!(out.residual, 0);
    /// out.result.unwrap();
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::put`].
    pub fn putv<B: IoBuf>(&self, entries: Vec<SgEntry<B>>, flags: SgFlags) -> SgOp<B> {
        self.vector(Way::Put, entries, flags, |local| match local {
            SgLocal::Buffer(b) => Some((b.stable_ptr().cast_mut(), b.bytes_len())),
            SgLocal::Handle(_) => None,
        })
    }

    /// Scatters the segment into the entries' local pieces (`rsm_memseg_import_getv`) and
    /// resolves when all of them have arrived. Validation and residual count as for
    /// [`ImportSegment::putv`].
    ///
    /// # Cancel safety
    /// As for [`ImportSegment::get`].
    pub fn getv<B: IoBufMut>(&self, entries: Vec<SgEntry<B>>, flags: SgFlags) -> SgOp<B> {
        self.vector(Way::Get, entries, flags, |local| match local {
            SgLocal::Buffer(b) => Some((b.stable_mut_ptr(), b.bytes_len())),
            SgLocal::Handle(_) => None,
        })
    }

    /// The piece of one entry, or its error (DESIGN.md, decision 17's validation). Inlined into the
    /// validation loop: returned through memory, each piece was read back in two halves
    /// its stores could not forward, most of the loop's time in a 4 KiB loopback getv.
    #[inline(always)]
    fn entry_piece<B>(&self, e: &SgEntry<B>, buf: Option<(*mut u8, usize)>) -> Result<Piece> {
        let seg_len = self.inner.length;
        if e.remote_offset > seg_len || (e.remote_offset == seg_len && e.len > 0) {
            return Err(Error::bad_offset().detail(format!(
                "remote offset {} lies past the segment's {seg_len} bytes",
                e.remote_offset
            )));
        }
        if e.remote_offset
            .checked_add(e.len as u64)
            .is_none_or(|end| end > seg_len)
        {
            return Err(Error::bad_length().detail(format!(
                "remote offset {} + length {} runs past the segment's {seg_len} bytes",
                e.remote_offset, e.len
            )));
        }
        let (ptr, desc) = match (&e.local, buf) {
            (SgLocal::Handle(h), _) => h.range(self.inner.ctrl.serial(), e.local_offset, e.len)?,
            (SgLocal::Buffer(_), Some((ptr, len))) => {
                if e.local_offset > len {
                    return Err(Error::bad_addr().detail(format!(
                        "local offset {} lies past the buffer's {len} bytes",
                        e.local_offset
                    )));
                }
                if e.local_offset
                    .checked_add(e.len)
                    .is_none_or(|end| end > len)
                {
                    return Err(Error::bad_length().detail(format!(
                        "local offset {} + length {} runs past the buffer's {len} bytes",
                        e.local_offset, e.len
                    )));
                }
                (ptr.wrapping_add(e.local_offset), std::ptr::null_mut())
            }
            (SgLocal::Buffer(_), None) => {
                return Err(Error::bad_addr().detail("the entry has no buffer"));
            }
        };
        Ok(Piece {
            ptr,
            len: e.len,
            desc,
            offset: e.remote_offset,
        })
    }

    /// Checks and starts a vector; `buffer` gives an owned buffer's pointer and length (the
    /// mutable one for a getv, which writes through it).
    fn vector<B: Send + 'static>(
        &self,
        way: Way,
        mut entries: Vec<SgEntry<B>>,
        flags: SgFlags,
        buffer: impl Fn(&mut SgLocal<B>) -> Option<(*mut u8, usize)>,
    ) -> SgOp<B> {
        let op_name = way.name();
        let kind = way.kind();
        let count = entries.len();
        let ctx = |e: Error| {
            e.op(op_name)
                .segment(self.inner.segment)
                .node(self.inner.node)
        };
        let fail = |e: Error, entries: Vec<SgEntry<B>>| {
            self.count_made(kind, 0);
            SgOp {
                op: Some(self.refused(op_name, ctx(e), entries)),
                count,
                invalid: None,
                flags,
                signal_to: None,
                signalling: None,
            }
        };
        if count == 0 || count > MAX_SGIOREQS {
            return fail(
                Error::bad_sgio().detail(format!(
                    "a vector has 1 to {MAX_SGIOREQS} entries, not {count}"
                )),
                entries,
            );
        }
        let need = match way {
            Way::Put => Perm::WRITE,
            Way::Get => Perm::READ,
        };
        let checks_abort = self.inner.path.checks_abort();
        if let Err(e) = self.check_access(op_name, need, 0, 0, checks_abort) {
            return fail(e, entries);
        }
        // The valid entries are the ones before the first invalid one: entry i is valid[i].
        // They are written straight into the list's room for all entries, where no push
        // can need to grow: with `Vec::push` in it the loop kept its values on the stack,
        // 74 instructions an entry (callgrind); gathered in a stack array and copied, they
        // cost 512 bytes zeroed and 512 copied per 16-entry vector, 16 cache lines touched
        // for nothing.
        let mut valid: Vec<Piece> = Vec::with_capacity(count);
        let mut n = 0;
        let mut invalid = None;
        let mut bytes = 0usize;
        for (e, slot) in entries.iter_mut().zip(valid.spare_capacity_mut()) {
            let buf = buffer(&mut e.local);
            match self.entry_piece(e, buf) {
                Ok(p) => {
                    bytes += p.len;
                    slot.write(p);
                    n += 1;
                }
                Err(e) => {
                    let detail = e.context().detail.clone().unwrap_or_default();
                    invalid = Some((n, ctx(e).detail(format!("entry {n}: {detail}"))));
                    break;
                }
            }
        }
        // SAFETY: the loop wrote the first `n` cells of the list's spare room, in order,
        // and `n` is at most `count`, its capacity.
        unsafe { valid.set_len(n) };
        self.count_made(kind, bytes);
        if let Some((_, e)) = &invalid {
            self.count_failure(kind, e);
        }
        let mut sg = self.vector_op(way, entries, valid, bytes, invalid, flags);
        if let (Some(span), Some(op)) = (self.op_span(kind, 0, bytes), sg.op.as_mut()) {
            op.trace(span);
        }
        sg
    }

    /// The vector's operation over its `valid` pieces (`bytes` in all).
    fn vector_op<B: Send + 'static>(
        &self,
        way: Way,
        entries: Vec<SgEntry<B>>,
        valid: Vec<Piece>,
        bytes: usize,
        invalid: Option<(usize, Error)>,
        flags: SgFlags,
    ) -> SgOp<B> {
        let count = entries.len();
        if bytes == 0 {
            // Nothing to move: the outcome is the validation's.
            return SgOp {
                op: Some(Op::done(entries)),
                count,
                invalid,
                flags,
                signal_to: self.implicit_signal(way, flags),
                signalling: None,
            };
        }
        let mut signal_to = self.implicit_signal(way, flags);
        let path = &self.inner.path;
        // A whole valid vector in one post carries its signal where the fabric can
        // (DESIGN.md §6.1); a cut one signals after, only if its first part succeeds.
        let op = match signal_to.as_ref().filter(|_| invalid.is_none()) {
            Some(seg) => {
                let word = seg.carried_word(sig_flags(flags));
                let (op, carried) = path.vector_signal(&self.inner, entries, valid, bytes, word);
                if carried {
                    self.count_carried();
                    signal_to = None;
                }
                op
            }
            None => path.vector(&self.inner, way, entries, valid, bytes),
        };
        SgOp {
            op: Some(op),
            count,
            invalid,
            flags,
            signal_to,
            signalling: None,
        }
    }
}

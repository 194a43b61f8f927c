//! The context ABI handed to the provider: the context pointer of every posted part is a
//! [`SlotHeader`], or a slot's header with the part's index tagged into its low bits, and the
//! provider hands it back in the part's completion, which [`SlotHeader::complete`] routes to
//! the object the header heads. The progress engine needs this much, not the slot behind it.

use crate::error::FabricFailure;
use crate::fabric::ffi;
use std::cell::UnsafeCell;

/// The type-erased head of every posted part: the context the provider gets, and how to
/// complete the part it heads. `repr(C)` with `ctx` first, so the context pointer is the
/// header pointer.
///
/// Where the provider only hands the context pointer back (no `FI_CONTEXT` mode: shm and
/// tcp), parts 1 to [`MAX_TAG`] of a slot are posted with the slot's own header pointer
/// plus their index: headers are 8-aligned, so the low bits tell the part, and the part
/// writes no context of its own. A 16-entry shm getv posts 4 parts, whose 3 proxies were
/// 288 bytes written and read back per operation.
#[repr(C)]
pub(crate) struct SlotHeader {
    ctx: UnsafeCell<ffi::fi_context2>,
    complete: CompleteFn,
}

/// Completes part `tag` (0 for a proxy, which knows its own index) of the object a header
/// heads.
pub(super) type CompleteFn =
    unsafe fn(*const SlotHeader, usize, std::result::Result<(), FabricFailure>);

/// The bits of a context pointer that carry a part's index (see [`SlotHeader`]).
const TAG_BITS: usize = 7;
/// The last part a tag can name.
pub(super) const MAX_TAG: usize = TAG_BITS;
const _: () = assert!(std::mem::align_of::<SlotHeader>() > TAG_BITS);

impl SlotHeader {
    pub(super) fn new(complete: CompleteFn) -> Self {
        SlotHeader {
            ctx: UnsafeCell::new(ffi::fi_context2::default()),
            complete,
        }
    }

    /// The context the provider gets: the header's own address.
    #[inline]
    pub(super) fn ctx(&self) -> *mut ffi::fi_context2 {
        self.ctx.get()
    }

    /// Completes the part whose context pointer is `ctx`.
    ///
    /// # Safety
    /// `ctx` must be a context pointer a slot posted whose completion has not been
    /// delivered yet; it is consumed.
    pub(crate) unsafe fn complete(ctx: usize, outcome: std::result::Result<(), FabricFailure>) {
        let h = (ctx & !TAG_BITS) as *const SlotHeader;
        // SAFETY: per the contract, h (the pointer without its tag) points to a live header
        // (the provider's count keeps it alive), whose `complete` matches the object it
        // heads and takes the tag it was posted with.
        unsafe { ((*h).complete)(h, ctx & TAG_BITS, outcome) }
    }
}

//! The controller's signal doorbell (DESIGN.md §6.1): one page registered
//! remote-write-only under its own key. Peers signal this node with an 8-byte
//! `fi_inject_writedata` to it; only the completion data matters, the bytes are never read.

use super::FabricBackend;
use crate::fabric::{MemoryRegion, MrAccess};
use crate::sans_io::wire::Doorbell;
use crate::sys::mem::Mapping;

/// A doorbell registration and the page under it.
pub(crate) struct DoorbellMr {
    // Declared before the page: the registration closes before the page is unmapped.
    mr: MemoryRegion,
    _page: Mapping,
    bell: Doorbell,
}

impl FabricBackend {
    /// This controller's doorbell, registered at the first call; `None` where the provider
    /// cannot carry a signal (completion data narrower than 8 bytes, or the registration
    /// failed): signals then go over the side channel.
    pub(crate) fn doorbell(&self) -> Option<Doorbell> {
        self.bell
            .get_or_init(|| self.register_doorbell())
            .as_ref()
            .map(|d| d.bell.clone())
    }

    /// Whether completion data carries a whole signal word (token and flags).
    pub(crate) fn carries_signals(&self) -> bool {
        self.cq_data_size >= 8
    }

    fn register_doorbell(&self) -> Option<DoorbellMr> {
        if !self.carries_signals() {
            return None;
        }
        let page = match Mapping::new(crate::sys::limits::page_size()) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(controller = %self.name, error = %e, "no doorbell page: signals use the side channel");
                return None;
            }
        };
        // SAFETY: the page stays mapped until the registration is closed (field order of
        // DoorbellMr), and the page is only ever written by the provider.
        match unsafe { self.register_region(page.as_ptr(), page.len(), MrAccess::REMOTE_WRITE) } {
            Ok((mr, key)) => {
                let addr = if self.virt_addr {
                    page.as_ptr() as u64
                } else {
                    0
                };
                let bell = Doorbell {
                    controller: self.name.clone(),
                    addr,
                    key,
                };
                Some(DoorbellMr {
                    mr,
                    _page: page,
                    bell,
                })
            }
            Err(e) => {
                tracing::warn!(controller = %self.name, error = %e, "no doorbell registration: signals use the side channel");
                None
            }
        }
    }
}

impl Drop for DoorbellMr {
    fn drop(&mut self) {
        tracing::trace!(key = self.mr.key(), "doorbell closed");
    }
}

//! Signals and pollfds (docs/rsmapi.md §4.7, DESIGN.md §7, decisions 3, 5 and 11): on an
//! export or an import handle alike.

use crate::codes::{self, Ret};
use crate::ctypes::POLLRDNORM;
use crate::export::EXPORTS;
use crate::guard;
use crate::held::Held;
use crate::import::IMPORTS;
use crate::node::{block, code};
use crate::sys;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An export or an import segment, as the `void *` of these calls names it.
enum Seg {
    Export(rsm::ExportSegment, Arc<Held>),
    Import(rsm::ImportSegment, Arc<Held>),
}

fn seg(h: *const c_void) -> Result<Seg, c_int> {
    if let Some(o) = EXPORTS.get(h) {
        return Ok(Seg::Export(o.seg.clone(), Arc::clone(&o.pollfds)));
    }
    let o = IMPORTS.get(h).ok_or(codes::BAD_SEG_HNDL)?;
    Ok(Seg::Import(o.seg.clone(), Arc::clone(&o.pollfds)))
}

/// The descriptors handed out, and whose events they consume.
static POLLFDS: Mutex<Option<HashMap<RawFd, Arc<Held>>>> = Mutex::new(None);

fn registered(fd: RawFd) -> Option<Arc<Held>> {
    let t = POLLFDS.lock().unwrap_or_else(|p| p.into_inner());
    t.as_ref().and_then(|m| m.get(&fd).cloned())
}

fn timeout(ms: c_int) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

fn post(h: *const c_void, flags: c_uint) -> Ret {
    let flags = rsm::SignalFlags::from_bits(flags);
    match seg(h)? {
        Seg::Export(s, _) => code(block(s.signal(flags))),
        Seg::Import(s, _) => code(block(s.signal(flags))),
    }
}

fn wait(h: *const c_void, ms: c_int) -> Ret {
    let t = timeout(ms);
    match seg(h)? {
        Seg::Export(s, _) => code(block(s.wait_signal(t))).map(drop),
        Seg::Import(s, _) => code(block(s.wait_signal(t))).map(drop),
    }
}

fn get_pollfd(h: *const c_void, out: *mut libc::pollfd) -> Ret {
    let seg = seg(h)?;
    if out.is_null() || out.align_offset(align_of::<libc::pollfd>()) != 0 {
        return Err(codes::BAD_ADDR);
    }
    let (fd, held) = match seg {
        Seg::Export(s, held) => (code(s.pollfd())?, held),
        Seg::Import(s, held) => (code(s.pollfd())?, held),
    };
    let (raw, first) = held.push(fd);
    if first {
        let mut t = POLLFDS.lock().unwrap_or_else(|p| p.into_inner());
        t.get_or_insert_with(HashMap::new).insert(raw, held);
    }
    // The eventfd reports POLLIN only: asking for it too makes plain poll(2) work.
    let pfd = libc::pollfd {
        fd: raw,
        events: POLLRDNORM | libc::POLLIN,
        revents: 0,
    };
    // SAFETY: non-null and aligned: the caller's pollfd.
    unsafe { out.write(pfd) };
    Ok(())
}

fn release_pollfd(h: *const c_void) -> Ret {
    let held = match seg(h)? {
        Seg::Export(_, held) | Seg::Import(_, held) => held,
    };
    if let Some(fd) = held.pop() {
        let mut t = POLLFDS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = t.as_mut() {
            m.remove(&fd);
        }
    }
    Ok(())
}

/// poll(2), then one event consumed per ready segment descriptor; a descriptor whose event
/// another thread took is cleared, and the wait goes on while time is left (decision 11).
fn wait_pollfd(fds: *mut libc::pollfd, n: libc::nfds_t, ms: c_int, numfdsp: *mut c_int) -> Ret {
    let n = usize::try_from(n).map_err(|_| codes::BAD_ARGS_ERRORS)?;
    if n > 0 && (fds.is_null() || fds.align_offset(align_of::<libc::pollfd>()) != 0) {
        return Err(codes::BAD_ADDR);
    }
    if !numfdsp.is_null() && numfdsp.align_offset(align_of::<c_int>()) != 0 {
        return Err(codes::BAD_ADDR);
    }
    if n > 0 {
        // SAFETY: poll(2) validates the array itself (`sys::poll_probe`).
        unsafe { sys::poll_probe(fds, n as libc::nfds_t) }.map_err(|e| match e.raw_os_error() {
            Some(libc::EFAULT) => codes::BAD_ADDR,
            Some(libc::EINTR) => codes::INTERRUPTED,
            Some(libc::ENOMEM | libc::EAGAIN) => codes::INSUFFICIENT_RESOURCES,
            _ => codes::BAD_ARGS_ERRORS,
        })?;
    }
    let fds: &mut [libc::pollfd] = if n == 0 {
        &mut []
    } else {
        // SAFETY: non-null, aligned, and proved readable and writable for nfds entries by
        // the probe: the caller's array, which nothing else touches during the call.
        unsafe { std::slice::from_raw_parts_mut(fds, n) }
    };
    for p in fds.iter_mut() {
        if p.events & POLLRDNORM != 0 && registered(p.fd).is_some() {
            p.events |= libc::POLLIN;
        }
    }
    let deadline = timeout(ms).map(|d| Instant::now() + d);
    loop {
        let left = deadline.map_or(-1, |d| {
            let ms = d.saturating_duration_since(Instant::now()).as_millis();
            c_int::try_from(ms).unwrap_or(c_int::MAX)
        });
        let ready = sys::poll(fds, left).map_err(|e| match e.raw_os_error() {
            Some(libc::EINTR) => codes::INTERRUPTED,
            Some(libc::EFAULT) => codes::BAD_ADDR,
            Some(libc::ENOMEM | libc::EAGAIN) => codes::INSUFFICIENT_RESOURCES,
            _ => codes::BAD_ARGS_ERRORS,
        })?;
        if ready == 0 {
            return Err(codes::TIMEOUT);
        }
        let mut count: c_int = 0;
        for p in fds.iter_mut() {
            let held = registered(p.fd);
            if held.is_some() && p.events & POLLRDNORM != 0 && p.revents & libc::POLLIN != 0 {
                // An event is pending: report it as the original's POLLRDNORM.
                p.revents = (p.revents & !libc::POLLIN) | POLLRDNORM;
            }
            if p.revents & POLLRDNORM != 0 {
                if let Some(held) = held {
                    if !held.try_consume() {
                        p.revents = 0;
                    }
                }
            }
            if p.revents != 0 {
                count += 1;
            }
        }
        if count > 0 {
            if !numfdsp.is_null() {
                // SAFETY: non-null and aligned (checked): the caller's count variable.
                unsafe { numfdsp.write(count) };
            }
            return Ok(());
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(codes::TIMEOUT);
        }
    }
}

/// `rsm_intr_signal_post`: signals the exporter (import handle) or every importer (export
/// handle); `RSM_SIGPOST_NO_ACCUMULATE` drops the post while one is pending.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_intr_signal_post(memseg: *mut c_void, flags: c_uint) -> c_int {
    guard::call("rsm_intr_signal_post", codes::BAD_SEG_HNDL, || {
        post(memseg, flags)
    })
}

/// `rsm_intr_signal_wait`: consumes one event, waiting at most `timeout` ms (-1: forever);
/// `RSMERR_TIMEOUT` only once the time has passed.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_intr_signal_wait(memseg: *mut c_void, timeout: c_int) -> c_int {
    guard::call("rsm_intr_signal_wait", codes::BAD_SEG_HNDL, || {
        wait(memseg, timeout)
    })
}

/// `rsm_memseg_get_pollfd`: the segment's descriptor, readable (`POLLRDNORM`) while events
/// are pending; counted until released.
///
/// # Safety
/// `poll_fd` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_memseg_get_pollfd(
    memseg: *mut c_void,
    poll_fd: *mut libc::pollfd,
) -> c_int {
    guard::call("rsm_memseg_get_pollfd", codes::BAD_SEG_HNDL, || {
        get_pollfd(memseg, poll_fd)
    })
}

/// `rsm_memseg_release_pollfd`: gives back one reference.
#[unsafe(no_mangle)]
pub extern "C" fn rsm_memseg_release_pollfd(memseg: *mut c_void) -> c_int {
    guard::call("rsm_memseg_release_pollfd", codes::BAD_SEG_HNDL, || {
        release_pollfd(memseg)
    })
}

/// `rsm_intr_signal_wait_pollfd`: `poll` over segment and other descriptors; each ready
/// segment descriptor has one event consumed. `*numfdsp` (if not NULL) is the number of
/// descriptors with events.
///
/// # Safety
/// `fds` is NULL or an array of `nfds` entries; `numfdsp` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_intr_signal_wait_pollfd(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
    numfdsp: *mut c_int,
) -> c_int {
    guard::call("rsm_intr_signal_wait_pollfd", codes::BAD_SEG_HNDL, || {
        wait_pollfd(fds, nfds, timeout, numfdsp)
    })
}

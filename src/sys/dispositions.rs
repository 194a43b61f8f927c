//! The process's signal dispositions stay the user's (DESIGN.md §3.1).
//!
//! libfabric's providers change them: Debian's libfabric needs the psm provider's libraries,
//! whose constructors install handlers for `SIGINT`, `SIGTERM`, `SIGSEGV`, `SIGBUS`, `SIGILL`
//! and `SIGABRT` that `exit(1)` before `main` runs; 1.17's shm installs its own for `SIGINT`,
//! `SIGTERM`, `SIGSEGV` and `SIGBUS` at its first endpoint. A handler found in place is kept
//! and called by tokio's signal handling (and most others), so the process would end before
//! the program saw the signal.
//!
//! Two things undo that. When `rsm` is loaded (before `main` in a Rust program, when the C
//! library is loaded in a C one) and at every guarded call, a handler whose code lives in
//! libfabric or a library it brought in is replaced by the default ([`ProviderCode`]). And
//! [`keep`] runs every libfabric call that may install handlers: it records the dispositions
//! before, and afterwards puts back each one a provider replaced, only while the handler in
//! place is still the provider's (a handler another thread installed meanwhile stays).

use super::objects::{ProviderCode, loaded};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Mutex, PoisonError};

/// Every classic signal but the two no handler can catch.
fn signals() -> impl Iterator<Item = c_int> {
    (1..32).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
}

/// One guarded call at a time in the process: two at once would each take the other's
/// provider handler for the one to keep.
static LOCK: Mutex<()> = Mutex::new(());

/// Objects loaded during guarded calls (providers libfabric opened itself), by path.
static LOADED_BY_PROVIDERS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// What was put back when `rsm` was loaded, until the first guarded call logs it (no
/// subscriber listens before `main`).
static PUT_BACK_AT_LOAD: Mutex<Vec<PutBack>> = Mutex::new(Vec::new());

thread_local! {
    /// Inside a guarded call on this thread: a nested one runs as it is.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: an `.init_array` entry is called once by the loader, after the libraries this one
// needs were initialised (so libfabric's have installed their handlers) and before `main`;
// `at_load` takes no arguments and never unwinds. Referenced from `keep`, so it is linked
// wherever a libfabric call is.
#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

extern "C" fn at_load() {
    let put_back = reset_inherited(&ProviderCode::now(&[]));
    lock(&PUT_BACK_AT_LOAD).extend(put_back);
}

/// A disposition put back: the signal, and the object whose handler was in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PutBack {
    pub(crate) signal: c_int,
    pub(crate) by: String,
}

/// Runs `f`, a libfabric call that may install signal handlers (`what` names it in the logs),
/// and puts back every disposition a provider changed meanwhile.
pub(crate) fn keep<T>(what: &'static str, f: impl FnOnce() -> T) -> T {
    if INSIDE.get() {
        return f();
    }
    let _guard = Guard::enter(what);
    f()
}

/// A guarded call in progress: restores on drop, also when `f` unwinds.
struct Guard {
    what: &'static str,
    before: Vec<(c_int, libc::sigaction)>,
    objects: Vec<String>,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl Guard {
    fn enter(what: &'static str) -> Guard {
        let held = lock(&LOCK);
        INSIDE.set(true);
        std::hint::black_box(AT_LOAD);
        let at_load = std::mem::take(&mut *lock(&PUT_BACK_AT_LOAD));
        let code = ProviderCode::now(&lock(&LOADED_BY_PROVIDERS));
        for p in at_load.iter().chain(&reset_inherited(&code)) {
            tracing::debug!(
                signal = signal_name(p.signal),
                handler_in = %p.by,
                "the default disposition put back in place of a handler libfabric's libraries \
                 installed before main"
            );
        }
        Guard {
            what,
            before: snapshot(),
            objects: loaded().into_iter().map(|o| o.path).collect(),
            _lock: held,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut also = lock(&LOADED_BY_PROVIDERS);
        for o in loaded() {
            if !o.path.is_empty() && !self.objects.contains(&o.path) && !also.contains(&o.path) {
                also.push(o.path);
            }
        }
        let code = ProviderCode::now(&also);
        drop(also);
        let (put_back, left) = restore(&self.before, |addr| code.owner(addr).map(str::to_owned));
        for p in put_back {
            tracing::debug!(
                signal = signal_name(p.signal),
                handler_in = %p.by,
                during = self.what,
                "the disposition a libfabric provider changed put back"
            );
        }
        for signal in left {
            tracing::debug!(
                signal = signal_name(signal),
                during = self.what,
                "a signal disposition changed, not by a provider: left as it is"
            );
        }
        INSIDE.set(false);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Replaces every handler in place whose code is a provider's by the default disposition.
fn reset_inherited(code: &ProviderCode) -> Vec<PutBack> {
    let default = default_action();
    let mut out = Vec::new();
    for signal in signals() {
        let Some(now) = get(signal) else { continue };
        let Some(by) = handler(&now).and_then(|h| code.owner(h)) else {
            continue;
        };
        if compare_and_set(signal, &now, &default) {
            out.push(PutBack {
                signal,
                by: by.to_string(),
            });
        }
    }
    out
}

/// The disposition of every signal.
fn snapshot() -> Vec<(c_int, libc::sigaction)> {
    signals().filter_map(|s| Some((s, get(s)?))).collect()
}

/// Puts back each disposition of `before` that changed to a handler `owner` knows (a
/// provider's), while it is still in place; returns those put back and the signals whose
/// disposition changed otherwise (left alone).
fn restore(
    before: &[(c_int, libc::sigaction)],
    owner: impl Fn(usize) -> Option<String>,
) -> (Vec<PutBack>, Vec<c_int>) {
    let (mut put_back, mut left) = (Vec::new(), Vec::new());
    for (signal, was) in before {
        let Some(now) = get(*signal) else { continue };
        if same(&now, was) {
            continue;
        }
        match handler(&now).and_then(&owner) {
            Some(by) if compare_and_set(*signal, &now, was) => put_back.push(PutBack {
                signal: *signal,
                by,
            }),
            _ => left.push(*signal),
        }
    }
    (put_back, left)
}

/// Installs `new` for `signal` if `expected` is in place. sigaction has no compare-and-swap:
/// this swaps, and if what it replaced was not `expected` (another thread installed a
/// handler since it was read), puts that back.
fn compare_and_set(signal: c_int, expected: &libc::sigaction, new: &libc::sigaction) -> bool {
    let Some(old) = swap(signal, new) else {
        return false;
    };
    if same(&old, expected) {
        return true;
    }
    let _ = swap(signal, &old);
    false
}

/// The handler's code address, for a disposition that runs one.
fn handler(a: &libc::sigaction) -> Option<usize> {
    (a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN).then_some(a.sa_sigaction)
}

/// `SA_RESTORER`: the C library sets it, and its own restorer, in every action it installs.
const SA_RESTORER: c_int = 0x0400_0000;

/// Whether two actions do the same (the C library's restorer aside).
fn same(a: &libc::sigaction, b: &libc::sigaction) -> bool {
    // SAFETY: sigismember reads the two sets, both initialised (by `get` or `default_action`).
    let masks = (1..=64)
        .all(|s| unsafe { libc::sigismember(&a.sa_mask, s) == libc::sigismember(&b.sa_mask, s) });
    let flags = |x: &libc::sigaction| x.sa_flags & !SA_RESTORER;
    a.sa_sigaction == b.sa_sigaction && flags(a) == flags(b) && masks
}

fn default_action() -> libc::sigaction {
    // SAFETY: an all-zero sigaction is valid: SIG_DFL, no flags; the mask is then emptied.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `a.sa_mask` is a sigset_t this function owns.
    unsafe { libc::sigemptyset(&mut a.sa_mask) };
    a.sa_sigaction = libc::SIG_DFL;
    a
}

fn get(signal: c_int) -> Option<libc::sigaction> {
    let mut a = default_action();
    // SAFETY: no new action is given, so nothing changes; `a` receives the current one.
    let rc = unsafe { libc::sigaction(signal, std::ptr::null(), &mut a) };
    (rc == 0).then_some(a)
}

/// Installs `new` for `signal`, returning what was in place.
fn swap(signal: c_int, new: &libc::sigaction) -> Option<libc::sigaction> {
    let mut old = default_action();
    // SAFETY: `new` is an action read from the kernel or the default, whose handler (if any)
    // is code that was installed for this signal before; `old` receives the previous one.
    let rc = unsafe { libc::sigaction(signal, new, &mut old) };
    (rc == 0).then_some(old)
}

fn signal_name(signal: c_int) -> String {
    // SAFETY: strsignal returns a string owned by the C library, copied at once.
    let text = unsafe { libc::strsignal(signal) };
    if text.is_null() {
        return signal.to_string();
    }
    // SAFETY: a NUL-terminated string from the C library.
    let name = unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy();
    format!("{signal} ({name})")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bodies that differ and stay: an optimised build folds identical functions into one
    // address.
    extern "C" fn provider_handler(s: c_int) {
        std::hint::black_box(s);
    }
    extern "C" fn user_handler(s: c_int) {
        std::hint::black_box(-s);
    }

    fn with_handler(h: extern "C" fn(c_int)) -> libc::sigaction {
        let mut a = default_action();
        a.sa_sigaction = h as usize;
        a
    }

    fn is(signal: c_int, h: usize) -> bool {
        get(signal).is_some_and(|a| a.sa_sigaction == h)
    }

    /// The fake provider's code is `provider_handler`.
    fn owner(addr: usize) -> Option<String> {
        (addr == provider_handler as *const () as usize).then(|| "provider.so".to_string())
    }

    #[test]
    fn a_providers_handler_is_put_back_and_one_installed_meanwhile_by_another_stays() {
        let _lock = lock(&LOCK);
        let (p, u) = (libc::SIGUSR1, libc::SIGUSR2);
        let before = snapshot();
        swap(p, &with_handler(provider_handler));
        swap(u, &with_handler(user_handler));
        let (put_back, left) = restore(&before, owner);
        assert_eq!(
            put_back,
            [PutBack {
                signal: p,
                by: "provider.so".into()
            }]
        );
        assert_eq!(left, [u]);
        let was = |s| {
            before
                .iter()
                .find(|(x, _)| *x == s)
                .map(|(_, a)| *a)
                .unwrap()
        };
        assert!(same(&get(p).unwrap(), &was(p)));
        assert!(is(u, user_handler as *const () as usize));
        swap(u, &was(u));
    }

    #[test]
    fn compare_and_set_leaves_a_handler_it_did_not_expect() {
        let _lock = lock(&LOCK);
        let s = libc::SIGUSR1;
        let was = get(s).unwrap();
        swap(s, &with_handler(user_handler));
        let expected = with_handler(provider_handler);
        assert!(!compare_and_set(s, &expected, &was));
        assert!(is(s, user_handler as *const () as usize));
        assert!(compare_and_set(s, &with_handler(user_handler), &was));
        assert!(same(&get(s).unwrap(), &was));
    }

    #[test]
    fn nested_guarded_calls_run_and_the_lock_is_released() {
        let v = keep("outer", || keep("inner", || 7));
        assert_eq!(v, 7);
        assert!(!INSIDE.get());
        drop(lock(&LOCK));
    }

    #[test]
    fn no_handler_of_libfabrics_libraries_is_in_place_once_rsm_is_loaded() {
        let _lock = lock(&LOCK);
        let code = ProviderCode::now(&[]);
        for s in signals() {
            let h = get(s).and_then(|a| handler(&a));
            assert_eq!(h.and_then(|h| code.owner(h)), None, "signal {s}");
        }
    }
}

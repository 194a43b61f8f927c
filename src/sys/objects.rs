//! Where code lives: the objects loaded into this process (the executable and its shared
//! libraries), their segments, and the libraries each needs, read from their program headers
//! and dynamic sections; and from them the objects libfabric brought in, which tell a signal
//! handler a provider installed from one the user did (DESIGN.md §3.1).

use std::ffi::{CStr, c_int, c_void};
use std::ops::Range;

/// One loaded object.
#[derive(Debug, Clone)]
pub(crate) struct Object {
    /// Its path as the loader knows it; empty for the executable.
    pub(crate) path: String,
    soname: Option<String>,
    /// The names (sonames) of the libraries it needs (`DT_NEEDED`).
    needed: Vec<String>,
    /// Where its loaded segments are.
    segments: Vec<Range<usize>>,
}

impl Object {
    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.segments.iter().any(|s| s.contains(&addr))
    }

    /// Whether a `DT_NEEDED` entry `name` refers to this object: its soname, or the file
    /// name the loader found under that name.
    fn known_as(&self, name: &str) -> bool {
        self.soname.as_deref() == Some(name) || self.path.rsplit('/').next() == Some(name)
    }
}

/// The objects loaded now, the executable first (`dl_iterate_phdr`'s order).
pub(crate) fn loaded() -> Vec<Object> {
    let mut out: Vec<Object> = Vec::new();
    // SAFETY: `visit` reads only what the loader hands it during the call, and `out`, which
    // the data pointer refers to, outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut out).cast()) };
    out
}

/// The code of libfabric and of the libraries it brought in: those it needs, transitively
/// (the psm provider's libraries), and `also`, objects loaded while it ran (providers it
/// opened itself). Never the executable, the C library or the dynamic loader: a handler there
/// is not a provider's.
pub(crate) struct ProviderCode {
    objects: Vec<Object>,
}

impl ProviderCode {
    pub(crate) fn now(also: &[String]) -> ProviderCode {
        let all = loaded();
        let at = |addr: usize| {
            if addr == 0 {
                None
            } else {
                all.iter().position(|o| o.contains(addr))
            }
        };
        let libfabric = at(symbol(c"fi_getinfo"));
        // The C library needs the loader, and everything needs the C library: neither is
        // walked into.
        let excluded = [
            Some(0),
            at(symbol(c"sigaction")),
            at(aux(libc::AT_BASE)),
            at(aux(libc::AT_SYSINFO_EHDR)),
        ];
        let mut queue: Vec<usize> = libfabric.into_iter().collect();
        queue.extend(
            all.iter()
                .enumerate()
                .filter(|(_, o)| !o.path.is_empty() && also.contains(&o.path))
                .map(|(i, _)| i),
        );
        queue.retain(|i| !excluded.contains(&Some(*i)));
        let mut taken: Vec<usize> = Vec::new();
        while let Some(i) = queue.pop() {
            if taken.contains(&i) {
                continue;
            }
            taken.push(i);
            let Some(object) = all.get(i) else { continue };
            for name in &object.needed {
                let found = all.iter().position(|o| o.known_as(name));
                if let Some(j) = found.filter(|j| !excluded.contains(&Some(*j))) {
                    queue.push(j);
                }
            }
        }
        taken.sort_unstable();
        let objects = all
            .into_iter()
            .enumerate()
            .filter(|(i, _)| taken.binary_search(i).is_ok())
            .map(|(_, o)| o)
            .collect();
        ProviderCode { objects }
    }

    /// The path of the object whose code `addr` is, if it is one of these.
    pub(crate) fn owner(&self, addr: usize) -> Option<&str> {
        self.objects
            .iter()
            .find(|o| o.contains(addr))
            .map(|o| o.path.as_str())
    }
}

/// The address the loader resolves `name` to in the global scope; 0 if none.
fn symbol(name: &CStr) -> usize {
    // SAFETY: `name` is NUL-terminated; dlsym only looks the name up.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

fn aux(kind: libc::c_ulong) -> usize {
    // SAFETY: getauxval only reads the auxiliary vector; unknown kinds give 0.
    unsafe { libc::getauxval(kind) as usize }
}

/// `Elf64_Dyn`: a tag and a value or address.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dyn {
    tag: i64,
    val: u64,
}

const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;
const DT_STRTAB: i64 = 5;
const DT_STRSZ: i64 = 10;
const DT_SONAME: i64 = 14;

/// The `dl_iterate_phdr` callback: appends the object to the `Vec<Object>` behind `data`.
#[cfg(target_pointer_width = "64")]
unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the loader passes a valid description for the duration of the call, and `data`
    // is the vector `loaded` passed, borrowed by nothing else meanwhile.
    let (info, out) = unsafe { (&*info, &mut *data.cast::<Vec<Object>>()) };
    let bias = info.dlpi_addr as usize;
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader's program headers of this object: `dlpi_phnum` of them.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let span = |p: &libc::Elf64_Phdr| {
        let start = bias.checked_add(usize::try_from(p.p_vaddr).ok()?)?;
        Some(start..start.checked_add(usize::try_from(p.p_memsz).ok()?)?)
    };
    let loads: Vec<(Range<usize>, bool)> = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .filter_map(|p| Some((span(p)?, p.p_flags & libc::PF_R != 0)))
        .collect();
    // Bytes inside one readable loaded segment are mapped and may be read.
    let readable = |r: &Range<usize>| {
        loads
            .iter()
            .any(|(s, read)| *read && s.start <= r.start && r.end <= s.end && r.start <= r.end)
    };
    let path = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: the loader's NUL-terminated name of this object.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let mut object = Object {
        path,
        soname: None,
        needed: Vec::new(),
        segments: loads.iter().map(|(s, _)| s.clone()).collect(),
    };
    let dynamic = phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_DYNAMIC)
        .and_then(span)
        .filter(readable);
    if let Some(dynamic) = dynamic {
        let count = dynamic.len() / size_of::<Dyn>();
        let at = dynamic.start as *const Dyn;
        let (mut strtab, mut strsz) = (None, 0usize);
        let (mut needed, mut soname) = (Vec::new(), None);
        for i in 0..count {
            // SAFETY: entry `i` lies inside the dynamic segment, which `readable` checked.
            let d = unsafe { at.add(i).read_unaligned() };
            match d.tag {
                DT_NULL => break,
                DT_NEEDED => needed.push(d.val),
                DT_SONAME => soname = Some(d.val),
                DT_STRTAB => strtab = usize::try_from(d.val).ok(),
                DT_STRSZ => strsz = usize::try_from(d.val).unwrap_or(0),
                _ => {}
            }
        }
        // glibc relocates the table's address in place; an object it did not (the vDSO)
        // holds it relative to the load address.
        let strtab = strtab
            .map(|s| if s < bias { s.wrapping_add(bias) } else { s })
            .and_then(|s| Some(s..s.checked_add(strsz)?))
            .filter(readable);
        if let Some(strtab) = strtab {
            // SAFETY: the string table's bytes lie inside a readable loaded segment.
            let table = unsafe { std::slice::from_raw_parts(strtab.start as *const u8, strsz) };
            let name = |off: u64| {
                let rest = table.get(usize::try_from(off).ok()?..)?;
                let s = CStr::from_bytes_until_nul(rest).ok()?;
                Some(s.to_string_lossy().into_owned())
            };
            object.needed = needed.into_iter().filter_map(name).collect();
            object.soname = soname.and_then(name);
        }
    }
    out.push(object);
    0
}

#[cfg(not(target_pointer_width = "64"))]
unsafe extern "C" fn visit(_: *mut libc::dl_phdr_info, _: usize, _: *mut c_void) -> c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() {}

    #[test]
    fn libfabric_and_what_it_needs_are_provider_code_and_the_program_and_libc_are_not() {
        let code = ProviderCode::now(&[]);
        let libfabric = code
            .owner(symbol(c"fi_getinfo"))
            .expect("libfabric's own object");
        assert!(libfabric.contains("libfabric"), "{libfabric}");
        assert_eq!(code.owner(local as fn() as usize), None, "the executable");
        assert_eq!(code.owner(symbol(c"sigaction")), None, "the C library");
        // Debian's libfabric needs the psm provider's libraries, which install handlers.
        let all = loaded();
        if let Some(psm) = all.iter().find(|o| o.path.contains("libinfinipath")) {
            let inside = psm.segments.first().map(|s| s.start).unwrap_or(0);
            assert_eq!(code.owner(inside), Some(psm.path.as_str()));
        }
    }

    #[test]
    fn every_object_has_segments_and_the_executable_comes_first() {
        let all = loaded();
        assert!(all.len() > 2);
        assert!(all[0].path.is_empty() && all[0].contains(local as fn() as usize));
        assert!(all.iter().all(|o| !o.segments.is_empty()));
        let libfabric = all.iter().find(|o| o.path.contains("libfabric")).unwrap();
        assert!(libfabric.needed.iter().any(|n| n.starts_with("libc.so")));
    }
}

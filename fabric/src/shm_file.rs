//! Telling a libfabric 1.17 shm region file, and the process that made it, from the file's
//! name and bytes: what `rsm` checks before it removes a region a dead process left under
//! `/dev/shm`.
//!
//! 1.17's shm names an endpoint's region `<pid>:<uid>:<index>` (the process that made it, its
//! real uid, the endpoint's number in that process) and removes it when the endpoint closes,
//! or from its handler of a fatal signal; a process killed outright leaves it behind. The
//! region's header records the version of its layout, the pid of its maker (written last, once
//! the region is ready), its size and its own name (`struct smr_region`, the same layout
//! [`crate::shm_ids`] reads).

use crate::shm_region::{
    AT_NAME_OFFSET, AT_PID, AT_TOTAL_SIZE, AT_VERSION, HEADER, REGION_VERSION,
};
use crate::version::{Version, library_version};

/// The parts of a region file's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionName {
    /// The process that made it.
    pub pid: u32,
    /// The real uid of that process.
    pub uid: u32,
    /// The endpoint's number in that process.
    pub index: u32,
}

/// The parts of `file` if it is named as a 1.17 shm region (`<pid>:<uid>:<index>`, decimal
/// numbers as `printf("%d")` writes them, a pid above 0).
///
/// ```
/// use rsm_fabric::shm_file::{RegionName, region_name};
///
/// assert_eq!(region_name("4242:0:1"), Some(RegionName { pid: 4242, uid: 0, index: 1 }));
/// assert_eq!(region_name("4242:0:1_7"), None); // a message's mapping, not a region
/// assert_eq!(region_name("04242:0:1"), None);
/// ```
pub fn region_name(file: &str) -> Option<RegionName> {
    let mut parts = file.split(':');
    let mut number = || {
        let p = parts.next()?;
        let canonical = !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p == "0" || !p.starts_with('0'));
        canonical.then(|| p.parse::<i32>().ok())?.map(|n| n as u32)
    };
    let name = RegionName {
        pid: number()?,
        uid: number()?,
        index: number()?,
    };
    (parts.next().is_none() && name.pid > 0).then_some(name)
}

/// Whether this process's libfabric lays out shm regions as this module reads them (1.17).
pub fn layout_known() -> bool {
    library_version()
        == Version {
            major: 1,
            minor: 17,
        }
}

/// The pid of the process that made the region file `file` of `len` bytes, whose bytes
/// `read(offset, buf)` fills (false when it cannot): `Some` only if `file` is named as a region,
/// its header is laid out as 1.17's and gives `len` as its size, the name it records is
/// `file`, and the pid it records is the one in that name (never 0: a region being made
/// records its pid last).
///
/// ```
/// use rsm_fabric::shm_file::region_owner;
///
/// let nothing = |_: u64, _: &mut [u8]| false;
/// assert_eq!(region_owner("4242:0:0", 4096, nothing), None);
/// ```
pub fn region_owner(
    file: &str,
    len: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
) -> Option<u32> {
    let named = region_name(file)?;
    let mut header = [0u8; HEADER];
    if len < HEADER as u64 || !read(0, &mut header) {
        return None;
    }
    let word = |at: usize| {
        let bytes = header.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_ne_bytes(bytes))
    };
    let pid = i32::from_ne_bytes(header.get(AT_PID..AT_PID + 4)?.try_into().ok()?);
    let laid_out = header.get(AT_VERSION) == Some(&REGION_VERSION)
        && word(AT_TOTAL_SIZE)? == len
        && u32::try_from(pid).ok() == Some(named.pid);
    if !laid_out {
        return None;
    }
    let name_at = word(AT_NAME_OFFSET)?;
    let end = name_at.checked_add(file.len() as u64 + 1)?;
    if name_at < HEADER as u64 || end > len {
        return None;
    }
    let mut recorded = vec![0u8; file.len() + 1];
    if !read(name_at, &mut recorded) {
        return None;
    }
    let (text, nul) = recorded.split_at(file.len());
    (text == file.as_bytes() && nul == [0]).then_some(named.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region as 1.17 lays out its header, `len` bytes, recording `pid` and `name`.
    fn region(pid: i32, name: &str, len: usize) -> Vec<u8> {
        let name_at = len - 512;
        let mut r = vec![0u8; len];
        r[AT_VERSION] = REGION_VERSION;
        r[AT_PID..AT_PID + 4].copy_from_slice(&pid.to_ne_bytes());
        r[AT_TOTAL_SIZE..AT_TOTAL_SIZE + 8].copy_from_slice(&(len as u64).to_ne_bytes());
        r[AT_NAME_OFFSET..AT_NAME_OFFSET + 8].copy_from_slice(&(name_at as u64).to_ne_bytes());
        r[name_at..name_at + name.len()].copy_from_slice(name.as_bytes());
        r
    }

    fn owner(file: &str, r: &[u8]) -> Option<u32> {
        region_owner(file, r.len() as u64, |at, buf| {
            let at = at as usize;
            match r.get(at..at + buf.len()) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    true
                }
                None => false,
            }
        })
    }

    #[test]
    fn a_region_names_its_maker() {
        assert_eq!(owner("77:0:0", &region(77, "77:0:0", 8192)), Some(77));
        assert_eq!(owner("77:1000:3", &region(77, "77:1000:3", 4096)), Some(77));
    }

    #[test]
    fn anything_else_names_no_one() {
        let good = region(77, "77:0:0", 8192);
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("77:0:1", good.clone()),
            ("78:0:0", region(78, "77:0:0", 8192)),
            ("77:0:0", region(78, "78:0:0", 8192)),
            ("77:0:0", region(0, "77:0:0", 8192)),
            ("77:0:0", region(-77, "77:0:0", 8192)),
            ("77:0:0", good[..4096].to_vec()),
            ("77:0:0", good[..HEADER - 1].to_vec()),
            ("77:0:0_1", good.clone()),
            ("x", good.clone()),
        ];
        let mut version = good.clone();
        version[AT_VERSION] = REGION_VERSION + 1;
        cases.push(("77:0:0", version));
        let mut name_outside = good.clone();
        name_outside[AT_NAME_OFFSET..AT_NAME_OFFSET + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
        cases.push(("77:0:0", name_outside));
        let mut name_in_header = good.clone();
        name_in_header[AT_NAME_OFFSET..AT_NAME_OFFSET + 8].copy_from_slice(&8u64.to_ne_bytes());
        cases.push(("77:0:0", name_in_header));
        let mut unterminated = region(77, "77:0:0", 8192);
        unterminated[8192 - 512 + 6] = b'9';
        cases.push(("77:0:0", unterminated));
        for (file, r) in cases {
            assert_eq!(owner(file, &r), None, "{file}");
        }
    }

    #[test]
    fn names_are_parsed_strictly() {
        for bad in [
            "",
            "1:2",
            "1:2:3:4",
            "0:0:0",
            "-1:0:0",
            "+1:0:0",
            "1::0",
            "1:0:x",
            "01:0:0",
            "99999999999:0:0",
            "1 :0:0",
        ] {
            assert_eq!(region_name(bad), None, "{bad:?}");
        }
        assert_eq!(
            region_name("1:0:0"),
            Some(RegionName {
                pid: 1,
                uid: 0,
                index: 0
            })
        );
    }
}

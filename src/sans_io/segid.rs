//! Segment ids: the reserved ranges of RSMAPI (docs/rsmapi.md §3.6), the ids publish accepts (DESIGN.md, decision 8)
//! and the segment-id file `/etc/rsm/rsm.segmentid` behind `rsm_get_segmentid_range` (docs/rsmapi.md §4.9,
//! §5.1, DESIGN.md, decision 9).
//!
//! Everything here is pure except [`get_segmentid_range`] and [`get_segmentid_range_from`],
//! which read the file; [`parse_segmentid_file`] and [`lookup`] work on its text.
//!
//! ```
//! use rsm::test_util::segid::{check_publish_id, lookup};
//!
//! let text = "#keyword  appid    baseid    length\nreserved  SUNWfoo  0x600000  1000\n";
//! let range = lookup(text, "example", "sunwfoo")?;
//! assert_eq!((range.base, range.length), (0x600000, 1000));
//! // An application publishes at `base + own offset`, so an administrator can move the range.
//! check_publish_id(range.base + 7)?;
//! # Ok::<(), rsm::Error>(())
//! ```

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// First id of the range owned by interconnect drivers.
pub const RSM_DRIVER_PRIVATE_ID_BASE: u32 = 0x0;
/// Last id of the range owned by interconnect drivers.
pub const RSM_DRIVER_PRIVATE_ID_END: u32 = 0x0F_FFFF;
/// First id of the range owned by the cluster transport.
pub const RSM_CLUSTER_TRANSPORT_ID_BASE: u32 = 0x10_0000;
/// Last id of the range owned by the cluster transport.
pub const RSM_CLUSTER_TRANSPORT_ID_END: u32 = 0x1F_FFFF;
/// First id of the range owned by the RSM base and NDI libraries.
pub const RSM_RSMLIB_ID_BASE: u32 = 0x20_0000;
/// Last id of the range owned by the RSM base and NDI libraries.
pub const RSM_RSMLIB_ID_END: u32 = 0x2F_FFFF;
/// First id of the range owned by the RSM DLPI driver.
pub const RSM_DLPI_ID_BASE: u32 = 0x30_0000;
/// Last id of the range owned by the RSM DLPI driver.
pub const RSM_DLPI_ID_END: u32 = 0x3F_FFFF;
/// First id of the range owned by HPC software (publish does not block it).
pub const RSM_HPC_ID_BASE: u32 = 0x40_0000;
/// Last id of the range owned by HPC software.
pub const RSM_HPC_ID_END: u32 = 0x4F_FFFF;
/// First id of the range owned by rsmops (publish does not block it).
pub const RSM_OPS_ID_BASE: u32 = 0x50_0000;
/// Last id of the range owned by rsmops.
pub const RSM_OPS_ID_END: u32 = 0x5F_FFFF;
/// First id of the range that, despite its name, the node hands out when publish is given id 0.
pub const RSM_USER_APP_ID_BASE: u32 = 0x8000_0000;
/// Last id of the range the node hands out when publish is given id 0.
pub const RSM_USER_APP_ID_END: u32 = 0xFFFF_FFFF;

/// Smallest id a caller may choose for publish, and the lowest a segment-id file range may use.
pub const APP_ID_MIN: u32 = 0x40_0000;
/// Largest id a caller may choose for publish, and the highest a segment-id file range may use.
pub const APP_ID_MAX: u32 = 0x7FFF_FFFF;
/// First id the node assigns when publish is given id 0; assigned ids count up from here.
pub const AUTO_ID_BASE: u32 = 0x8000_0000;

/// Where the segment-id file is when [`SEGMENTID_FILE_ENV`] is not set.
pub const DEFAULT_SEGMENTID_FILE: &str = "/etc/rsm/rsm.segmentid";
/// The environment variable that names another segment-id file.
pub const SEGMENTID_FILE_ENV: &str = "RSM_SEGMENTID_FILE";
/// The largest segment-id file accepted, in bytes.
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// The longest line accepted in a segment-id file, in bytes, without its line end.
pub const MAX_LINE_BYTES: usize = 4096;

const OP: &str = "get_segmentid_range";

/// The range of segment ids reserved for one application in the segment-id file.
///
/// The application may use `base ..= base + length - 1`; every range read from a file is
/// non-empty and lies within [`APP_ID_MIN`]`..=`[`APP_ID_MAX`].
///
/// ```
/// use rsm::test_util::segid::{SegmentIdRange, parse_segmentid_file};
///
/// let entries = parse_segmentid_file("reserved SUNWfoo 0x600000 1000", "example")?;
/// let expected = SegmentIdRange { appid: "SUNWfoo".into(), base: 0x600000, length: 1000 };
/// assert_eq!(entries, [expected]);
/// assert!(entries[0].contains(0x600000 + 999));
/// assert!(!entries[0].contains(0x600000 + 1000));
/// # Ok::<(), rsm::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIdRange {
    /// The application id, as written in the file.
    pub appid: String,
    /// The first id of the range.
    pub base: u32,
    /// The number of ids in the range.
    pub length: u32,
}

impl SegmentIdRange {
    /// Whether `id` lies in this range.
    ///
    /// ```
    /// use rsm::SegmentIdRange;
    ///
    /// let range = SegmentIdRange { appid: "app".into(), base: 0x400000, length: 2 };
    /// assert!(range.contains(0x400001));
    /// assert!(!range.contains(0x400002) && !range.contains(0x3FFFFF));
    /// ```
    pub fn contains(&self, id: u32) -> bool {
        // Subtracting first cannot overflow, unlike computing the end of the range.
        id >= self.base && id - self.base < self.length
    }
}

/// Parses a whole segment-id file, validating every line, and returns its entries in order.
///
/// `source` names the file in error messages. Each line is blank, a comment, or four fields
/// separated by blanks or tabs: the keyword `reserved` (or `reserve`, in any case), the
/// application id, the base id in hexadecimal (with or without `0x`) and the length in decimal.
/// `#` starts a comment anywhere on a line.
///
/// # Errors
///
/// `RSMERR_BAD_CONF` (44), naming `source` and the 1-based line number, for the first line
/// that is malformed, longer than [`MAX_LINE_BYTES`], or whose range overflows, is empty or
/// leaves `0x400000`-`0x7FFFFFFF`; also for a text larger than [`MAX_FILE_BYTES`].
///
/// ```
/// use rsm::test_util::segid::parse_segmentid_file;
///
/// let text = "\n# HPC jobs\nRESERVE  mpi  400000  64  # 64 ids\nreserved\tdb\t0X7FFF0000\t65536\n";
/// let entries = parse_segmentid_file(text, "example")?;
/// assert_eq!(entries.len(), 2);
/// assert_eq!((entries[1].appid.as_str(), entries[1].base), ("db", 0x7FFF0000));
///
/// let e = parse_segmentid_file("reserved app 0x600000 0\n", "/etc/rsm/rsm.segmentid").unwrap_err();
/// assert!(matches!(e, rsm::Error::BadConf(_)));
/// assert!(e.to_string().contains("/etc/rsm/rsm.segmentid line 1: length 0 is empty"));
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn parse_segmentid_file(text: &str, source: &str) -> Result<Vec<SegmentIdRange>> {
    if text.len() > MAX_FILE_BYTES {
        return Err(too_large(source));
    }
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let entry = parse_line(line).map_err(|what| line_error(source, index + 1, what))?;
        entries.extend(entry);
    }
    Ok(entries)
}

/// Finds the range of `appid` in the text of a segment-id file: the first entry whose
/// application id matches, ignoring ASCII case.
///
/// The whole text is validated first, so a configuration error anywhere in the file is
/// reported even when an earlier line matches.
///
/// # Errors
///
/// `RSMERR_BAD_ADDR` (16) for an empty `appid` (the C API's NULL); `RSMERR_BAD_CONF` (44) as in
/// [`parse_segmentid_file`]; `RSMERR_BAD_APPID` (43), naming `appid` and `source`, when no
/// entry matches.
///
/// ```
/// use rsm::test_util::segid::lookup;
///
/// let text = "reserved SUNWfoo 0x600000 1000\nreserved sunwFOO 0x700000 10\n";
/// assert_eq!(lookup(text, "example", "SUNWFOO")?.base, 0x600000);
/// assert!(matches!(lookup(text, "example", "SUNWbar").unwrap_err(), rsm::Error::BadAppid(_)));
/// assert!(matches!(lookup(text, "example", "").unwrap_err(), rsm::Error::BadAddr(_)));
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn lookup(text: &str, source: &str, appid: &str) -> Result<SegmentIdRange> {
    check_appid(appid)?;
    parse_segmentid_file(text, source)?
        .into_iter()
        .find(|entry| entry.appid.eq_ignore_ascii_case(appid))
        .ok_or_else(|| {
            Error::bad_appid()
                .op(OP)
                .detail(format!("no entry for application id {appid:?} in {source}"))
        })
}

/// The segment-id file to read: the path in [`SEGMENTID_FILE_ENV`] if it is set and not
/// empty, else [`DEFAULT_SEGMENTID_FILE`].
///
/// ```
/// use rsm::test_util::segid::{DEFAULT_SEGMENTID_FILE, SEGMENTID_FILE_ENV, segmentid_file_path};
///
/// if std::env::var_os(SEGMENTID_FILE_ENV).is_none() {
///     assert_eq!(segmentid_file_path(), std::path::Path::new(DEFAULT_SEGMENTID_FILE));
/// }
/// ```
pub fn segmentid_file_path() -> PathBuf {
    match std::env::var_os(SEGMENTID_FILE_ENV) {
        // An empty value is what `VAR= cmd` leaves behind; treat it as unset, not as a path.
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_SEGMENTID_FILE),
    }
}

/// Looks up the segment-id range reserved for `appid` (`rsm_get_segmentid_range`), in the
/// file named by [`segmentid_file_path`].
///
/// # Errors
///
/// As [`get_segmentid_range_from`].
///
/// ```
/// match rsm::get_segmentid_range("SUNWfoo") {
///     Ok(range) => assert!(range.length > 0),
///     // No file, a broken file (44), or no entry for the application (43).
///     Err(e) => assert!(matches!(e, rsm::Error::BadAppid(_) | rsm::Error::BadConf(_)), "{e}"),
/// }
/// assert!(matches!(rsm::get_segmentid_range("").unwrap_err(), rsm::Error::BadAddr(_)));
/// ```
pub fn get_segmentid_range(appid: &str) -> Result<SegmentIdRange> {
    // The C API rejects a NULL appid before it touches anything, including the environment.
    check_appid(appid)?;
    get_segmentid_range_from(&segmentid_file_path(), appid)
}

/// Looks up the segment-id range reserved for `appid` in the segment-id file at `path`.
///
/// # Errors
///
/// `RSMERR_BAD_ADDR` (16) for an empty `appid`, before the file is read; `RSMERR_BAD_CONF` (44)
/// naming the path when the file cannot be read, is larger than [`MAX_FILE_BYTES`], is not
/// UTF-8 or has a bad line; `RSMERR_BAD_APPID` (43) when no entry matches.
///
/// ```
/// use std::io::Write;
/// use rsm::test_util::segid::get_segmentid_range_from;
///
/// let mut file = tempfile::NamedTempFile::new()?;
/// writeln!(file, "reserved SUNWfoo 0x600000 1000")?;
/// let range = get_segmentid_range_from(file.path(), "SUNWfoo")?;
/// assert_eq!((range.base, range.length), (0x600000, 1000));
///
/// let missing = get_segmentid_range_from("/nonexistent/rsm.segmentid".as_ref(), "SUNWfoo");
/// assert!(matches!(missing.unwrap_err(), rsm::Error::BadConf(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn get_segmentid_range_from(path: &Path, appid: &str) -> Result<SegmentIdRange> {
    check_appid(appid)?;
    let source = path.display().to_string();
    let bytes = read_bounded(path).map_err(|e| unreadable(&source, &e))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_large(&source));
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        line_error(&source, line, "not UTF-8 text")
    })?;
    lookup(text, &source, appid)
}

/// Checks a caller-chosen segment id for publish (DESIGN.md, decision 8): 0 (the node assigns one from
/// [`AUTO_ID_BASE`] up) or [`APP_ID_MIN`]`..=`[`APP_ID_MAX`].
///
/// # Errors
///
/// `RSMERR_RESERVED_SEGID` (23) with the id as the context's segment for any other id.
///
/// ```
/// use rsm::test_util::segid::check_publish_id;
///
/// assert!(check_publish_id(0).is_ok());
/// assert!(check_publish_id(0x400000).is_ok() && check_publish_id(0x7FFFFFFF).is_ok());
/// let e = check_publish_id(0x80000000).unwrap_err();
/// assert_eq!((e.code(), e.context().segment), (23, Some(0x80000000)));
/// ```
pub fn check_publish_id(id: u32) -> Result<()> {
    let why = if id == 0 || (APP_ID_MIN..=APP_ID_MAX).contains(&id) {
        return Ok(());
    } else if id < APP_ID_MIN {
        "ids below 0x400000 are reserved for the system; choose one from 0x400000 to 0x7FFFFFFF"
    } else {
        "ids from 0x80000000 up are assigned by the node; publish with id 0 to get one"
    };
    Err(Error::reserved_segid()
        .op("publish")
        .segment(id)
        .detail(why))
}

/// Checks the name a segment is published under (DESIGN.md §8, "Discovery"): 1 to
/// [`MAX_SEGMENT_NAME`](super::wire::MAX_SEGMENT_NAME) bytes of UTF-8 without control
/// characters, so that a listing prints it on one line as it is.
///
/// # Errors
///
/// `RSMERR_BAD_SEGID` saying what is wrong with it.
///
/// ```
/// use rsm::test_util::segid::check_segment_name;
///
/// assert!(check_segment_name("features").is_ok() && check_segment_name("état/2").is_ok());
/// for bad in ["", "a\nb", &"n".repeat(129)] {
///     assert_eq!(check_segment_name(bad).unwrap_err().code(), 22);
/// }
/// ```
pub fn check_segment_name(name: &str) -> Result<()> {
    let max = super::wire::MAX_SEGMENT_NAME;
    let why = if name.is_empty() {
        "a segment name is not empty".to_string()
    } else if name.len() > max {
        format!(
            "a segment name is at most {max} bytes, this one {}",
            name.len()
        )
    } else if name.chars().any(char::is_control) {
        "a segment name holds no control character".to_string()
    } else {
        return Ok(());
    };
    Err(Error::bad_segid().op("publish").detail(why))
}

/// One line: `Ok(None)` for a blank or comment line, `Err` with what is wrong with it.
fn parse_line(line: &str) -> std::result::Result<Option<SegmentIdRange>, String> {
    if line.len() > MAX_LINE_BYTES {
        return Err(format!(
            "line is {} bytes, longer than the limit of {MAX_LINE_BYTES}",
            line.len()
        ));
    }
    let content = line
        .split_once('#')
        .map_or(line, |(before, _comment)| before);
    let fields: Vec<&str> = content.split(is_blank).filter(|f| !f.is_empty()).collect();
    match fields.as_slice() {
        [] => Ok(None),
        [keyword, appid, base, length] => {
            check_keyword(keyword)?;
            let base = parse_base(base)?;
            let length = parse_length(length)?;
            check_range(base, length)?;
            Ok(Some(SegmentIdRange {
                appid: (*appid).to_owned(),
                base,
                length,
            }))
        }
        other => Err(format!(
            "expected 4 fields (keyword appid baseid length), found {}",
            other.len()
        )),
    }
}

/// Field separators: blanks and tabs, plus the rest of C's `isspace` so that a stray CR (a
/// file edited on Windows) or form feed does not break a line.
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\x0b' | '\x0c')
}

/// The manual spells the keyword `reserve`, its example and the original code `reserved`.
fn check_keyword(keyword: &str) -> std::result::Result<(), String> {
    if keyword.eq_ignore_ascii_case("reserved") || keyword.eq_ignore_ascii_case("reserve") {
        Ok(())
    } else {
        Err(format!(
            "unknown keyword {keyword:?}, expected \"reserved\""
        ))
    }
}

fn parse_base(field: &str) -> std::result::Result<u32, String> {
    let digits = field
        .strip_prefix("0x")
        .or_else(|| field.strip_prefix("0X"))
        .unwrap_or(field);
    // `from_str_radix` alone would also take a sign; the file format has none.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("base id {field:?} is not a hexadecimal number"));
    }
    u32::from_str_radix(digits, 16).map_err(|_| format!("base id {field} overflows 32 bits"))
}

fn parse_length(field: &str) -> std::result::Result<u32, String> {
    if !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("length {field:?} is not a decimal number"));
    }
    field
        .parse::<u32>()
        .map_err(|_| format!("length {field} overflows 32 bits"))
}

fn check_range(base: u32, length: u32) -> std::result::Result<(), String> {
    if length == 0 {
        return Err("length 0 is empty".to_owned());
    }
    let last = base
        .checked_add(length - 1)
        .ok_or_else(|| format!("range {} + {length} overflows 32 bits", Hex(base)))?;
    if base < APP_ID_MIN || last > APP_ID_MAX {
        return Err(format!(
            "range {}-{} leaves {}-{}",
            Hex(base),
            Hex(last),
            Hex(APP_ID_MIN),
            Hex(APP_ID_MAX)
        ));
    }
    Ok(())
}

fn check_appid(appid: &str) -> Result<()> {
    if appid.is_empty() {
        return Err(Error::bad_addr()
            .op(OP)
            .detail("the application id is empty"));
    }
    Ok(())
}

/// Reads at most one byte past the limit, so a huge file (or `/dev/zero`) costs no more
/// than that while "too large" can still be told from "exactly at the limit".
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn unreadable(source: &str, e: &std::io::Error) -> Error {
    let hint = if e.kind() == std::io::ErrorKind::NotFound {
        format!("; create it, or point {SEGMENTID_FILE_ENV} at one")
    } else {
        String::new()
    };
    Error::bad_conf()
        .op(OP)
        .detail(format!("cannot read {source}: {e}{hint}"))
}

fn too_large(source: &str) -> Error {
    Error::bad_conf()
        .op(OP)
        .detail(format!("{source} is larger than {MAX_FILE_BYTES} bytes"))
}

fn line_error(source: &str, line: usize, what: impl fmt::Display) -> Error {
    Error::bad_conf()
        .op(OP)
        .detail(format!("{source} line {line}: {what}"))
}

/// Ids as docs/rsmapi.md and the file write them: `0x` and upper-case digits.
struct Hex(u32);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:X}", self.0)
    }
}

#[cfg(test)]
mod tests;

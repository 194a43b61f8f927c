//! What tells two nodes of one host apart from two hosts: the Linux boot id, mixed with the
//! network namespace (DESIGN.md §8, "Hosts"). Namespaces of one boot share the boot id and
//! `/dev/shm` but not their network: nodes in two of them are two hosts to each other.

use std::fs;

/// Where Linux publishes the id of the current boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This host's id as hellos carry it: the boot id with its last 8 bytes XORed with the
/// inode of this process's network namespace (when it can be read), so that nodes of one
/// boot in two network namespaces see two hosts. All zero when the boot id cannot be read
/// (then no TCP peer is taken for a same-host one).
pub(super) fn local_host_id() -> [u8; 16] {
    host_id(local_boot_id(), crate::sys::files::network_namespace())
}

/// `boot` with `netns` (little-endian) XORed into its last 8 bytes; an unknown boot stays
/// unknown (all zero).
pub(super) fn host_id(boot: [u8; 16], netns: Option<u64>) -> [u8; 16] {
    let mut id = boot;
    if let (true, Some(ns)) = (boot != [0; 16], netns) {
        for (b, n) in id[8..].iter_mut().zip(ns.to_le_bytes()) {
            *b ^= n;
        }
    }
    // An id that the mix made all zero would read as unknown: keep the boot id then.
    if id == [0; 16] { boot } else { id }
}

/// This host's boot id as 16 bytes, all zero when it cannot be read.
fn local_boot_id() -> [u8; 16] {
    match fs::read_to_string(BOOT_ID_PATH) {
        Ok(text) => parse_boot_id(&text).unwrap_or_else(|| {
            tracing::warn!(
                path = BOOT_ID_PATH,
                "the boot id does not parse; same-host peers are recognised by their Unix link only"
            );
            [0; 16]
        }),
        Err(e) => {
            tracing::debug!(path = BOOT_ID_PATH, error = %e, "no boot id");
            [0; 16]
        }
    }
}

/// Parses a boot id such as `b8fb8ca4-d6f1-4091-91b0-345813b0624b` (32 hex digits, dashes
/// anywhere, surrounding whitespace ignored).
pub(super) fn parse_boot_id(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut nibbles = 0usize;
    for c in text.trim().chars().filter(|c| *c != '-') {
        let v = c.to_digit(16)?;
        let byte = out.get_mut(nibbles / 2)?;
        // Each digit fits a nibble: `to_digit(16)` is below 16.
        *byte = (*byte << 4) | (v as u8);
        nibbles += 1;
    }
    (nibbles == 32).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_format() {
        let id = parse_boot_id("b8fb8ca4-d6f1-4091-91b0-345813b0624b\n").expect("parses");
        assert_eq!(id[0], 0xb8);
        assert_eq!(id[15], 0x4b);
        assert_eq!(id[4], 0xd6);
    }

    #[test]
    fn refuses_what_is_not_a_boot_id() {
        assert_eq!(parse_boot_id(""), None);
        assert_eq!(parse_boot_id("b8fb8ca4"), None);
        assert_eq!(parse_boot_id("x8fb8ca4-d6f1-4091-91b0-345813b0624b"), None);
        assert_eq!(
            parse_boot_id("b8fb8ca4-d6f1-4091-91b0-345813b0624b00"),
            None
        );
    }

    #[test]
    fn namespaces_of_one_boot_are_other_hosts() {
        let boot = parse_boot_id("b8fb8ca4-d6f1-4091-91b0-345813b0624b").expect("parses");
        let a = host_id(boot, Some(4_026_531_840));
        let b = host_id(boot, Some(4_026_532_305));
        assert_ne!(a, b);
        assert_eq!(a, host_id(boot, Some(4_026_531_840)));
        assert_eq!(&a[..8], &boot[..8]);
        assert_eq!(host_id(boot, None), boot);
        assert_eq!(host_id([0; 16], Some(7)), [0; 16]);
    }

    #[test]
    fn the_local_boot_id_is_stable() {
        assert_eq!(local_boot_id(), local_boot_id());
    }
}

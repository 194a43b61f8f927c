//! Comparing version strings as printed by pkg-config ("1.17.0") and dpkg
//! ("1.17.0-3", "1:1.17.0-3~bpo12+1").

use std::cmp::Ordering;

/// The leading numeric components of the upstream part of `version`: epoch
/// and Debian revision dropped, and parsing stopped at the first component
/// that does not start with a digit. `None` if there is no number at all.
pub fn numbers(version: &str) -> Option<Vec<u64>> {
    let version = version.trim();
    let without_epoch = version.split_once(':').map_or(version, |(_, rest)| rest);
    // Only the leading numbers matter for a minimum version check, so cutting
    // at the first '-', '~' or '+' is enough and spares a full Debian parser.
    let upstream = without_epoch
        .split(['-', '~', '+'])
        .next()
        .unwrap_or(without_epoch);
    let mut numbers = Vec::new();
    for component in upstream.split('.') {
        let digits: String = component.chars().take_while(char::is_ascii_digit).collect();
        let Ok(number) = digits.parse() else { break };
        numbers.push(number);
    }
    (!numbers.is_empty()).then_some(numbers)
}

/// Whether `version` is `minimum` or newer, missing components counting as 0
/// so that "1.17.0" satisfies 1.17. `None` if `version` has no numbers.
pub fn at_least(version: &str, minimum: &[u64]) -> Option<bool> {
    let numbers = numbers(version)?;
    let len = numbers.len().max(minimum.len());
    let at = |list: &[u64], i: usize| list.get(i).copied().unwrap_or(0);
    let ordering = (0..len)
        .map(|i| at(&numbers, i).cmp(&at(minimum, i)))
        .find(|ordering| ordering.is_ne())
        .unwrap_or(Ordering::Equal);
    Some(ordering.is_ge())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &[u64] = &[1, 17];

    #[test]
    fn debian_12_package_is_new_enough() {
        assert_eq!(at_least("1.17.0-3", MIN), Some(true));
    }

    #[test]
    fn pkg_config_version_is_new_enough() {
        assert_eq!(at_least("1.17.0", MIN), Some(true));
        assert_eq!(at_least("1.17", MIN), Some(true));
        assert_eq!(at_least("1.17.0\n", MIN), Some(true));
    }

    #[test]
    fn newer_versions_pass() {
        assert_eq!(at_least("1.18.1-1", MIN), Some(true));
        assert_eq!(at_least("2.0.0", MIN), Some(true));
        assert_eq!(at_least("1.22.0~bpo12+1", MIN), Some(true));
    }

    #[test]
    fn older_versions_fail() {
        assert_eq!(at_least("1.16.1", MIN), Some(false));
        assert_eq!(at_least("1.11.0-3", MIN), Some(false));
        assert_eq!(at_least("1", MIN), Some(false));
    }

    #[test]
    fn components_compare_as_numbers_not_text() {
        assert_eq!(at_least("1.9.9", MIN), Some(false));
        assert_eq!(at_least("1.100", MIN), Some(true));
    }

    #[test]
    fn epoch_is_ignored() {
        assert_eq!(numbers("1:1.17.0-3"), Some(vec![1, 17, 0]));
    }

    #[test]
    fn suffixes_end_the_numbers() {
        assert_eq!(numbers("1.17.0rc1"), Some(vec![1, 17, 0]));
        assert_eq!(numbers("1.17.x"), Some(vec![1, 17]));
    }

    #[test]
    fn no_numbers_is_none() {
        assert_eq!(numbers(""), None);
        assert_eq!(numbers("unknown"), None);
        assert_eq!(at_least("", MIN), None);
    }
}

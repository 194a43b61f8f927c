//! Controller names (docs/rsmapi.md §4.1): `<type><unit>`, `<type>:<domain>`, or `loopback`.

use crate::{Error, Result};

/// The longest name accepted (`MAXNAMELEN` - 1 on Solaris).
pub const MAX_NAME_LEN: usize = 255;

/// A parsed controller name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControllerName {
    /// `loopback` with any unit number, or no name at all.
    Loopback,
    /// `<type><unit>`, such as `tcp0`: the unit-th domain of that provider type.
    Unit {
        /// The provider type, lowercase (`tcp`, `shm`, `sockets`, `udp`, `verbs`, ...).
        kind: String,
        /// The unit number (0 when the name has no digits).
        unit: u32,
    },
    /// `<type>:<domain>`, such as `tcp:lo`.
    Domain {
        /// The provider type, lowercase.
        kind: String,
        /// The domain name, as the provider spells it.
        domain: String,
    },
}

impl ControllerName {
    /// Parses a name as `rsm_get_controller` does: the type is compared case-insensitively,
    /// trailing digits are the unit, and a missing or empty name means `loopback`.
    ///
    /// ```
    /// use rsm::test_util::ctlrname::ControllerName;
    /// assert_eq!(ControllerName::parse(Some("TCP0")).unwrap(),
    ///            ControllerName::Unit { kind: "tcp".into(), unit: 0 });
    /// assert_eq!(ControllerName::parse(Some("loopback3")).unwrap(), ControllerName::Loopback);
    /// assert_eq!(ControllerName::parse(None).unwrap(), ControllerName::Loopback);
    /// assert!(matches!(ControllerName::parse(Some("bogus!")).unwrap_err(), rsm::Error::CtlrNotPresent(_)));
    /// ```
    pub fn parse(name: Option<&str>) -> Result<Self> {
        let Some(raw) = name.map(str::trim).filter(|s| !s.is_empty()) else {
            return Ok(ControllerName::Loopback);
        };
        let not_present = |why: &str| {
            Error::ctlr_not_present()
                .op("get_controller")
                .controller(truncate(raw))
                .detail(why.to_string())
        };
        if raw.len() > MAX_NAME_LEN {
            return Err(not_present("the name is longer than 255 bytes"));
        }
        if let Some((kind, domain)) = raw.split_once(':') {
            let kind = valid_kind(kind)
                .ok_or_else(|| not_present("the type must be letters, digits, '_' or '-'"))?;
            if domain.is_empty() || domain.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(not_present("the domain name is empty or has blanks"));
            }
            if kind == "loopback" {
                return Ok(ControllerName::Loopback);
            }
            return Ok(ControllerName::Domain {
                kind,
                domain: domain.to_string(),
            });
        }
        let split = raw.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (kind, digits) = raw.split_at(split);
        let kind = valid_kind(kind).ok_or_else(|| {
            not_present("the name must be a type followed by a unit number, such as tcp0")
        })?;
        let unit = if digits.is_empty() {
            0
        } else {
            digits
                .parse::<u32>()
                .map_err(|_| not_present("the unit number is too large"))?
        };
        if kind == "loopback" {
            return Ok(ControllerName::Loopback);
        }
        Ok(ControllerName::Unit { kind, unit })
    }
}

fn valid_kind(kind: &str) -> Option<String> {
    let ok = !kind.is_empty()
        && kind.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    ok.then(|| kind.to_ascii_lowercase())
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unit(kind: &str, unit: u32) -> ControllerName {
        ControllerName::Unit {
            kind: kind.into(),
            unit,
        }
    }

    #[test]
    fn names_parse_as_the_spec_says() {
        assert_eq!(ControllerName::parse(Some("tcp0")).unwrap(), unit("tcp", 0));
        assert_eq!(ControllerName::parse(Some("Shm1")).unwrap(), unit("shm", 1));
        assert_eq!(
            ControllerName::parse(Some("sockets")).unwrap(),
            unit("sockets", 0)
        );
        assert_eq!(
            ControllerName::parse(Some("udp12")).unwrap(),
            unit("udp", 12)
        );
        for l in ["loopback", "LOOPBACK3", "loopback0", "", "  ", "Loopback:x"] {
            assert_eq!(
                ControllerName::parse(Some(l)).unwrap(),
                ControllerName::Loopback,
                "{l}"
            );
        }
        assert_eq!(
            ControllerName::parse(Some("TCP:lo")).unwrap(),
            ControllerName::Domain {
                kind: "tcp".into(),
                domain: "lo".into()
            }
        );
    }

    #[test]
    fn bad_names_are_ctlr_not_present() {
        for bad in [
            "0tcp",
            "tcp 0",
            "tcp:",
            ":lo",
            "t!cp0",
            "tcp99999999999",
            "tcp:l o",
        ] {
            let e = ControllerName::parse(Some(bad)).unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
            assert_eq!(e.context().op, Some("get_controller"));
        }
        let long = "a".repeat(300);
        assert_eq!(ControllerName::parse(Some(&long)).unwrap_err().code(), 4);
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,300}") {
            let _ = ControllerName::parse(Some(&s));
        }

        #[test]
        fn type_and_unit_round_trip(kind in "[a-z][a-z_]{0,10}", n in any::<u32>()) {
            prop_assume!(kind != "loopback");
            let parsed = ControllerName::parse(Some(&format!("{}{n}", kind.to_uppercase()))).unwrap();
            prop_assert_eq!(parsed, unit(&kind, n));
        }
    }
}

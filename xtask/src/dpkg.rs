//! Asking dpkg what is installed.

use crate::command::stdout_of;

/// Whether dpkg reports `package` as installed; `None` when dpkg-query is not
/// available (not a Debian system), so callers can fall back to other probes.
pub fn installed(package: &str) -> Option<bool> {
    if !crate::command::on_path("dpkg-query") {
        return None;
    }
    // dpkg-query exits non-zero for a package it has never heard of, which
    // stdout_of turns into None: that also means "not installed".
    let status = stdout_of("dpkg-query", &["-W", "-f=${Status}", package]);
    Some(status.is_some_and(|status| status_is_installed(&status)))
}

/// The installed version of `package`, e.g. "1.17.0-3".
pub fn version(package: &str) -> Option<String> {
    stdout_of("dpkg-query", &["-W", "-f=${Version}", package]).filter(|v| !v.is_empty())
}

/// Reads a `${Status}` field ("want error-flag status"). "install ok
/// installed" is the usual answer, but a package on hold ("hold ok
/// installed") is installed too, while "deinstall ok config-files" (removed,
/// configuration kept) or an error flag mean it is not usable.
pub fn status_is_installed(status: &str) -> bool {
    let mut words = status.split_whitespace();
    let _want = words.next();
    let flag = words.next();
    let state = words.next();
    flag == Some("ok") && state == Some("installed") && words.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_package() {
        assert!(status_is_installed("install ok installed"));
        assert!(status_is_installed("install ok installed\n"));
    }

    #[test]
    fn held_package_is_installed() {
        assert!(status_is_installed("hold ok installed"));
    }

    #[test]
    fn removed_package_with_config_left_is_not_installed() {
        assert!(!status_is_installed("deinstall ok config-files"));
    }

    #[test]
    fn unpacked_or_broken_package_is_not_installed() {
        assert!(!status_is_installed("install ok unpacked"));
        assert!(!status_is_installed("install ok half-configured"));
        assert!(!status_is_installed("install reinstreq installed"));
    }

    #[test]
    fn unknown_or_empty_output_is_not_installed() {
        assert!(!status_is_installed(""));
        assert!(!status_is_installed("unknown ok not-installed"));
        assert!(!status_is_installed("install ok installed extra"));
    }
}

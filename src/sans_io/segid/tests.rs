//! Unit tests of `segid.rs`.

use super::*;

const SRC: &str = "/etc/rsm/rsm.segmentid";

fn range(appid: &str, base: u32, length: u32) -> SegmentIdRange {
    SegmentIdRange {
        appid: appid.to_owned(),
        base,
        length,
    }
}

fn parse(text: &str) -> Result<Vec<SegmentIdRange>> {
    parse_segmentid_file(text, SRC)
}

/// Asserts that `text` is BAD_CONF at `line` with a message containing `what`.
fn assert_conf_error(text: &str, line: usize, what: &str) {
    let e = parse(text).expect_err(text);
    assert_eq!(e.code(), 44, "{e}");
    let detail = e.context().detail.clone().unwrap_or_default();
    let prefix = format!("{SRC} line {line}: ");
    assert!(
        detail.starts_with(&prefix),
        "{detail:?} should start with {prefix:?}"
    );
    assert!(detail.contains(what), "{detail:?} should contain {what:?}");
    assert!(e.to_string().contains(&detail), "{e}");
}

#[test]
fn constants_match_the_spec_tables() {
    assert_eq!(RSM_DRIVER_PRIVATE_ID_BASE, 0);
    assert_eq!(RSM_DRIVER_PRIVATE_ID_END + 1, RSM_CLUSTER_TRANSPORT_ID_BASE);
    assert_eq!(RSM_CLUSTER_TRANSPORT_ID_END + 1, RSM_RSMLIB_ID_BASE);
    assert_eq!(RSM_RSMLIB_ID_END + 1, RSM_DLPI_ID_BASE);
    assert_eq!(RSM_DLPI_ID_END + 1, RSM_HPC_ID_BASE);
    assert_eq!(RSM_HPC_ID_END + 1, RSM_OPS_ID_BASE);
    assert_eq!(RSM_OPS_ID_END, 0x5F_FFFF);
    assert_eq!(RSM_HPC_ID_BASE, APP_ID_MIN);
    assert_eq!(APP_ID_MAX + 1, AUTO_ID_BASE);
    assert_eq!(AUTO_ID_BASE, RSM_USER_APP_ID_BASE);
    assert_eq!(RSM_USER_APP_ID_END, u32::MAX);
}

#[test]
fn parses_the_documented_example() {
    let text = "#keyword     appid    baseid    length\nreserved     SUNWfoo  0x600000  1000\n";
    assert_eq!(parse(text).unwrap(), [range("SUNWfoo", 0x600000, 1000)]);
}

#[test]
fn empty_and_comment_only_files_have_no_entries() {
    for text in [
        "",
        "\n",
        "\n\n  \n\t\n",
        "# only\n   # indented\n#\n",
        "#no newline",
    ] {
        assert_eq!(parse(text).unwrap(), [], "{text:?}");
    }
}

#[test]
fn keyword_is_reserved_or_reserve_in_any_case() {
    for kw in [
        "reserved", "RESERVED", "Reserved", "reserve", "RESERVE", "rEsErVe",
    ] {
        let text = format!("{kw} app 400000 1");
        assert_eq!(parse(&text).unwrap(), [range("app", 0x400000, 1)], "{text}");
    }
}

#[test]
fn unknown_keywords_are_bad_conf() {
    for kw in ["reserv", "reservedd", "reserves", "allow", "0x400000"] {
        assert_conf_error(&format!("\n{kw} app 400000 1"), 2, "unknown keyword");
    }
}

#[test]
fn comments_start_anywhere_on_a_line() {
    let text = "reserved a 0x400000 10 # trailing\n\
                reserved b 0x500000 20# glued\n\
                \t  # indented comment\n\
                reserved c 0x600000 30 #### many\n\
                reserved d 0x700000 40#";
    assert_eq!(
        parse(text).unwrap(),
        [
            range("a", 0x400000, 10),
            range("b", 0x500000, 20),
            range("c", 0x600000, 30),
            range("d", 0x700000, 40),
        ]
    );
    // A `#` inside a field cuts the line short, leaving too few fields.
    assert_conf_error("reserved app#x 0x400000 1", 1, "found 2");
    // ... while one right after the length just ends it.
    assert_eq!(
        parse("reserved app 0x400000 1#0").unwrap(),
        [range("app", 0x400000, 1)]
    );
}

#[test]
fn blanks_tabs_and_crlf_separate_fields() {
    let text = "  reserved\t\tapp \t 0x400000   7  \r\n\r\n\treserve b 0x400100 1\r\n";
    assert_eq!(
        parse(text).unwrap(),
        [range("app", 0x400000, 7), range("b", 0x400100, 1)]
    );
}

#[test]
fn base_is_hex_with_or_without_prefix() {
    for base in ["0x6000aB", "0X6000AB", "6000ab", "006000AB", "0x006000ab"] {
        let text = format!("reserved app {base} 1");
        assert_eq!(parse(&text).unwrap(), [range("app", 0x6000AB, 1)], "{text}");
    }
}

#[test]
fn bad_base_is_bad_conf() {
    for base in [
        "0x",
        "0X",
        "xyz",
        "+400000",
        "-400000",
        "0x-1",
        "0x4_00000",
        "40000g",
        "0x0x400000",
    ] {
        assert_conf_error(
            &format!("# c\nreserved app {base} 1"),
            2,
            "not a hexadecimal number",
        );
    }
    assert_conf_error("reserved app 0x100000000 1", 1, "overflows 32 bits");
    assert_conf_error(
        "reserved app FFFFFFFFFFFFFFFFFFFF 1",
        1,
        "overflows 32 bits",
    );
}

#[test]
fn length_is_decimal() {
    assert_eq!(
        parse("reserved app 400000 0010").unwrap(),
        [range("app", 0x400000, 10)]
    );
    for length in ["0x10", "a", "1e3", "+5", "-1", "1.0", "1_000", "١"] {
        assert_conf_error(
            &format!("reserved app 400000 {length}"),
            1,
            "not a decimal number",
        );
    }
    assert_conf_error("reserved app 400000 4294967296", 1, "overflows 32 bits");
}

#[test]
fn wrong_field_count_is_bad_conf_with_its_line() {
    assert_conf_error("reserved", 1, "found 1");
    assert_conf_error("\n\nreserved app 0x400000", 3, "found 3");
    assert_conf_error("# x\nreserved app 0x400000 1 extra", 2, "found 5");
    assert_conf_error(
        "reserved app 0x400000 1\nreserved app 0x400000 1 2 3",
        2,
        "found 6",
    );
}

#[test]
fn empty_range_is_bad_conf() {
    let text = "# keyword appid base length\n\nreserved app 0x600000 0\n";
    let e = parse(text).unwrap_err();
    assert_eq!(e.code(), 44);
    assert_eq!(e.name(), "RSMERR_BAD_CONF");
    assert!(
        e.to_string()
            .contains("/etc/rsm/rsm.segmentid line 3: length 0 is empty"),
        "{e}"
    );
}

#[test]
fn overflowing_range_is_bad_conf() {
    assert_conf_error("reserved app 0xFFFFFFFF 2", 1, "overflows 32 bits");
    assert_conf_error("reserved app 0x80000000 4294967295", 1, "overflows 32 bits");
}

#[test]
fn range_must_lie_in_the_application_ids() {
    assert_conf_error("reserved app 0x3FFFFF 1", 1, "leaves 0x400000-0x7FFFFFFF");
    assert_conf_error("reserved app 0 1", 1, "range 0x0-0x0 leaves");
    assert_conf_error(
        "reserved app 0x7FFFFFFF 2",
        1,
        "range 0x7FFFFFFF-0x80000000 leaves",
    );
    assert_conf_error("reserved app 0x80000000 1", 1, "leaves");
    assert_conf_error("reserved app 0xFFFFFFFF 1", 1, "leaves");
    let whole = APP_ID_MAX - APP_ID_MIN + 1;
    let ok =
        format!("reserved lo 0x400000 1\nreserved hi 0x7FFFFFFF 1\nreserved all 0x400000 {whole}");
    assert_eq!(
        parse(&ok).unwrap(),
        [
            range("lo", APP_ID_MIN, 1),
            range("hi", APP_ID_MAX, 1),
            range("all", APP_ID_MIN, whole)
        ]
    );
    assert_conf_error(&format!("reserved all 0x400000 {}", whole + 1), 1, "leaves");
}

#[test]
fn line_numbers_count_every_line() {
    let text = "# 1\n\nreserved a 400000 1\n   \n# 5\nreserved b 400000 1 # 6\nbogus\n";
    assert_conf_error(text, 7, "found 1");
    assert_conf_error("\r\n\r\n\r\nbogus", 4, "found 1");
}

#[test]
fn the_first_error_is_reported() {
    assert_conf_error("reserved a 1 1\nreserved b 400000 0", 1, "leaves");
}

#[test]
fn long_lines_are_bad_conf() {
    let fits = format!("reserved app 400000 1 #{}", "x".repeat(MAX_LINE_BYTES - 23));
    assert_eq!(fits.len(), MAX_LINE_BYTES);
    assert_eq!(parse(&fits).unwrap(), [range("app", 0x400000, 1)]);
    let too_long = format!("\n{fits}x");
    assert_conf_error(&too_long, 2, "longer than the limit of 4096");
    // Even a comment line counts: the bound is on what is read, not what is used.
    assert_conf_error(&format!("#{}", "y".repeat(MAX_LINE_BYTES)), 1, "4097 bytes");
}

#[test]
fn large_files_are_bad_conf() {
    let line = "reserved app 400000 1\n";
    let fits = line.repeat(MAX_FILE_BYTES / line.len());
    assert_eq!(parse(&fits).unwrap().len(), MAX_FILE_BYTES / line.len());
    let comments = "#".repeat(MAX_FILE_BYTES + 1);
    let e = parse(&comments).unwrap_err();
    assert_eq!(e.code(), 44);
    assert!(
        e.to_string()
            .contains("/etc/rsm/rsm.segmentid is larger than 1048576 bytes"),
        "{e}"
    );
    let e = lookup(&comments, SRC, "app").unwrap_err();
    assert_eq!(e.code(), 44);
}

#[test]
fn lookup_matches_appid_ignoring_case_first_entry_wins() {
    let text = "reserved SUNWfoo 0x600000 1000\n\
                reserved bar 0x700000 10\n\
                reserved sunwFOO 0x500000 5\n";
    let foo = range("SUNWfoo", 0x600000, 1000);
    assert_eq!(lookup(text, SRC, "SUNWfoo").unwrap(), foo);
    assert_eq!(lookup(text, SRC, "sunwfoo").unwrap(), foo);
    assert_eq!(lookup(text, SRC, "SUNWFOO").unwrap(), foo);
    assert_eq!(
        lookup(text, SRC, "BAR").unwrap(),
        range("bar", 0x700000, 10)
    );
}

#[test]
fn missing_appid_is_bad_appid_naming_appid_and_file() {
    let text = "reserved SUNWfoo 0x600000 1000\n";
    for appid in ["SUNWbar", "SUNWfo", "SUNWfoo ", "x#y", "SUNWfoo\0"] {
        let e = lookup(text, SRC, appid).unwrap_err();
        assert_eq!(e.code(), 43, "{appid:?}");
        assert_eq!(e.name(), "RSMERR_BAD_APPID");
        let s = e.to_string();
        assert!(s.contains(&format!("{appid:?}")) && s.contains(SRC), "{s}");
    }
    assert_eq!(lookup("", SRC, "app").unwrap_err().code(), 43);
}

#[test]
fn lookup_validates_the_whole_file() {
    let text = "reserved app 0x600000 1000\nreserved other 0x700000 0\n";
    assert_eq!(lookup(text, SRC, "app").unwrap_err().code(), 44);
    let e = lookup(text, "custom.file", "app").unwrap_err();
    assert!(
        e.to_string()
            .contains("custom.file line 2: length 0 is empty"),
        "{e}"
    );
}

#[test]
fn empty_appid_is_bad_addr_before_parsing() {
    for text in ["reserved app 0x600000 1", "garbage", ""] {
        let e = lookup(text, SRC, "").unwrap_err();
        assert_eq!(e.code(), 16);
        assert_eq!(e.name(), "RSMERR_BAD_ADDR");
    }
    assert_eq!(get_segmentid_range("").unwrap_err().code(), 16);
    let nowhere = Path::new("/nonexistent/dir/rsm.segmentid");
    assert_eq!(
        get_segmentid_range_from(nowhere, "").unwrap_err().code(),
        16
    );
}

#[test]
fn unreadable_file_is_bad_conf_naming_path() {
    let nowhere = Path::new("/nonexistent/dir/rsm.segmentid");
    let e = get_segmentid_range_from(nowhere, "app").unwrap_err();
    assert_eq!(e.code(), 44);
    let s = e.to_string();
    assert!(
        s.contains("cannot read /nonexistent/dir/rsm.segmentid"),
        "{s}"
    );
    assert!(
        s.contains("os error 2") && s.contains(SEGMENTID_FILE_ENV),
        "{s}"
    );
}

#[test]
fn check_publish_id_follows_decision_8() {
    for id in [
        0,
        APP_ID_MIN,
        APP_ID_MIN + 1,
        0x600000,
        APP_ID_MAX - 1,
        APP_ID_MAX,
    ] {
        assert!(check_publish_id(id).is_ok(), "{id:#x}");
    }
    for id in [
        1,
        RSM_RSMLIB_ID_BASE,
        APP_ID_MIN - 1,
        AUTO_ID_BASE,
        AUTO_ID_BASE + 1,
        u32::MAX,
    ] {
        let e = check_publish_id(id).unwrap_err();
        assert_eq!(e.code(), 23, "{id:#x}");
        assert_eq!(e.name(), "RSMERR_RESERVED_SEGID");
        assert_eq!(e.context().segment, Some(id));
        assert_eq!(e.context().op, Some("publish"));
    }
    assert!(
        check_publish_id(5)
            .unwrap_err()
            .to_string()
            .contains("0x400000")
    );
    assert!(
        check_publish_id(AUTO_ID_BASE)
            .unwrap_err()
            .to_string()
            .contains("id 0")
    );
}

#[test]
fn contains_handles_the_edges() {
    let r = range("a", APP_ID_MAX, 1);
    assert!(r.contains(APP_ID_MAX) && !r.contains(u32::MAX) && !r.contains(0));
    let empty = range("e", 0x400000, 0);
    assert!(!empty.contains(0x400000));
    let top = range("t", u32::MAX, u32::MAX);
    assert!(top.contains(u32::MAX) && !top.contains(u32::MAX - 1));
}

mod props {
    use super::super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn appid() -> impl Strategy<Value = String> {
        prop_oneof![
            // A small alphabet, so that duplicates (in any case) are common.
            "[a-cA-C]{1,2}",
            "[A-Za-z0-9_.:/-]{1,16}",
            // Anything without a separator or `#`, non-ASCII included.
            "[^\\s#]{1,8}",
        ]
    }

    fn entry() -> impl Strategy<Value = SegmentIdRange> {
        (appid(), APP_ID_MIN..=APP_ID_MAX)
            .prop_flat_map(|(appid, base)| {
                let room = APP_ID_MAX - base + 1;
                let length = prop_oneof![1..=room.min(1000), 1..=room];
                (Just(appid), Just(base), length)
            })
            .prop_map(|(appid, base, length)| SegmentIdRange {
                appid,
                base,
                length,
            })
    }

    fn keyword() -> impl Strategy<Value = String> {
        (
            prop_oneof![Just("reserved"), Just("reserve")],
            vec(any::<bool>(), 8),
        )
            .prop_map(|(word, upper)| {
                word.chars()
                    .zip(upper)
                    .map(|(c, up)| if up { c.to_ascii_uppercase() } else { c })
                    .collect()
            })
    }

    fn base_text(base: u32) -> impl Strategy<Value = String> {
        (
            prop_oneof![Just(""), Just("0x"), Just("0X")],
            any::<bool>(),
            "0{0,2}",
        )
            .prop_map(move |(prefix, upper, zeros)| {
                if upper {
                    format!("{prefix}{zeros}{base:X}")
                } else {
                    format!("{prefix}{zeros}{base:x}")
                }
            })
    }

    fn comment() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[ \t]{0,2}#[^\n]{0,30}"]
    }

    fn render(e: SegmentIdRange) -> impl Strategy<Value = String> {
        let (ws0, ws1) = ("[ \t]{0,3}", "[ \t]{1,3}");
        let fields = (
            ws0,
            keyword(),
            ws1,
            ws1,
            base_text(e.base),
            ws1,
            "0{0,2}",
            ws0,
            comment(),
        );
        fields.prop_map(move |(lead, kw, s1, s2, base, s3, zeros, trail, comment)| {
            let (appid, length) = (&e.appid, e.length);
            format!("{lead}{kw}{s1}{appid}{s2}{base}{s3}{zeros}{length}{trail}{comment}")
        })
    }

    fn filler() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[ \t]{1,4}", "[ \t]{0,2}#[^\n]{0,30}"]
    }

    fn eol() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("\n"), Just("\r\n")]
    }

    /// A well-formed file and the entries it holds, in order.
    fn well_formed_file() -> impl Strategy<Value = (Vec<SegmentIdRange>, String)> {
        vec(entry(), 0..10)
            .prop_flat_map(|entries| {
                let blocks: Vec<_> = entries
                    .iter()
                    .cloned()
                    .map(|e| (vec((filler(), eol()), 0..3), render(e), eol()))
                    .collect();
                (
                    Just(entries),
                    blocks,
                    vec((filler(), eol()), 0..3),
                    any::<bool>(),
                )
            })
            .prop_map(|(entries, blocks, tail, final_newline)| {
                let mut text = String::new();
                let fillers = blocks.into_iter().flat_map(|(fillers, line, eol)| {
                    fillers.into_iter().chain(std::iter::once((line, eol)))
                });
                for (line, eol) in fillers.chain(tail) {
                    text.push_str(&line);
                    text.push_str(eol);
                }
                if !final_newline && text.ends_with('\n') {
                    text.pop();
                }
                (entries, text)
            })
    }

    fn flip_case(s: &str, pattern: &[bool]) -> String {
        s.chars()
            .zip(pattern.iter().cycle())
            .map(|(c, &flip)| match (flip, c.is_ascii_uppercase()) {
                (false, _) => c,
                (true, true) => c.to_ascii_lowercase(),
                (true, false) => c.to_ascii_uppercase(),
            })
            .collect()
    }

    /// Lines that are close to valid, to reach the number and range checks.
    fn near_miss_file() -> impl Strategy<Value = String> {
        let line = "[ \t]{0,2}(reserved|RESERVE|reserv|x)?[ \t]{0,2}[ab#]{0,2}[ \t]{0,2}\
                    (0x|0X)?[0-9a-fA-F+-]{0,10}[ \t]{0,2}[0-9+-]{0,11}[ \t#\r]{0,2}";
        vec(line, 0..8).prop_map(|lines| lines.join("\n"))
    }

    fn check_no_panic(text: &str, appid: &str) {
        if let Ok(entries) = parse_segmentid_file(text, "fuzz") {
            for e in &entries {
                assert!(e.length > 0 && e.base >= APP_ID_MIN, "{e:?}");
                assert!(
                    e.base
                        .checked_add(e.length - 1)
                        .is_some_and(|l| l <= APP_ID_MAX)
                );
            }
        }
        let code = match lookup(text, "fuzz", appid) {
            Ok(found) => {
                assert!(found.appid.eq_ignore_ascii_case(appid));
                0
            }
            Err(e) => e.code(),
        };
        assert!([0, 16, 43, 44].contains(&code), "unexpected code {code}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn well_formed_files_parse_to_their_entries(
            (entries, text) in well_formed_file(),
            pattern in vec(any::<bool>(), 1..5),
        ) {
            prop_assert_eq!(&parse_segmentid_file(&text, "prop").unwrap(), &entries);
            for e in &entries {
                let query = flip_case(&e.appid, &pattern);
                let first = entries.iter().find(|x| x.appid.eq_ignore_ascii_case(&query));
                let found = lookup(&text, "prop", &query).unwrap();
                prop_assert_eq!(Some(&found), first);
            }
            // No appid in a well-formed file holds a blank.
            let absent = lookup(&text, "prop", "no such app").unwrap_err();
            prop_assert_eq!(absent.code(), 43);
        }

        #[test]
        fn arbitrary_text_never_panics(text in any::<String>(), appid in any::<String>()) {
            check_no_panic(&text, &appid);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..2048), appid in "[ -~]{0,4}") {
            check_no_panic(&String::from_utf8_lossy(&bytes), &appid);
        }

        #[test]
        fn near_misses_never_panic(text in near_miss_file(), appid in "[ab]{0,2}") {
            check_no_panic(&text, &appid);
        }

        #[test]
        fn check_publish_id_agrees_with_the_ranges(id in any::<u32>()) {
            let allowed = id == 0 || (APP_ID_MIN..=APP_ID_MAX).contains(&id);
            match check_publish_id(id) {
                Ok(()) => prop_assert!(allowed),
                Err(e) => {
                    prop_assert!(!allowed);
                    prop_assert_eq!(e.code(), 23);
                    prop_assert_eq!(e.context().segment, Some(id));
                }
            }
        }
    }
}

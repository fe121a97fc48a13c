//! `streams[].peak_rate`: needed by a tiered stream (it sizes the filter),
//! optional for an exact one (`plan` and `check` size its claims at it),
//! above zero in both.

use super::tests::{parse, refused, refused_by_the_parser, tiered, BASE};

#[test]
fn an_exact_stream_keeps_the_peak_rate_it_is_given_and_has_none_by_default() {
    let rated = parse(&format!("{BASE}peak_rate = 10\n")).unwrap();
    assert_eq!(rated.streams[0].peak_rate, Some(10));
    assert!(rated.streams[0].spec.filter.is_none(), "still exact");
    let unrated = parse(BASE).unwrap();
    assert_eq!(unrated.streams[0].peak_rate, None);
}

#[test]
fn a_zero_peak_rate_is_refused_naming_the_field_in_either_mode() {
    refused_by_the_parser(
        &tiered("tier1_ttl = \"2h\"").replace("peak_rate = 1000", "peak_rate = 0"),
        "peak_rate",
        "nonzero",
    );
    refused_by_the_parser(&format!("{BASE}peak_rate = 0\n"), "peak_rate", "nonzero");
}

#[test]
fn a_tiered_stream_without_peak_rate_is_refused() {
    let error = refused(&tiered("tier1_ttl = \"2h\"").replace("peak_rate = 1000", ""));
    assert!(error.starts_with("streams[0].peak_rate:"), "{error}");
    let config = parse(&tiered("tier1_ttl = \"2h\"")).unwrap();
    assert_eq!(config.streams[0].peak_rate, Some(1000));
}

//! The commit metadata format (`metadata.rs`): round trips, what replicas
//! before it wrote, and refusals.

use super::metadata::*;

fn stored(sequence: u64) -> RunsRef {
    RunsRef {
        writer: 0x0001_2a03,
        sequence,
        digest: digest(b"0.1"),
    }
}

#[test]
fn inline_runs_round_trip_and_other_writers_are_not_ours() {
    let metadata = Metadata {
        gap_free: true,
        runs: Runs::Inline(vec![(10, 12), (15, 16)]),
        marks: Vec::new(),
    };
    let text = encode("Ab", &metadata);
    assert_eq!(text, "idemgate/3 Ab gap-free d=a.2,3.1");
    assert_eq!(parse("Ab", &text), Ok(Some(metadata.clone())));
    assert_eq!(
        inline("Ab", true, &[(10, 12), (15, 16)]).as_deref(),
        Some(text.as_str())
    );
    assert_eq!(
        parse("Ab", "idemgate/3 Ab gaps"),
        Ok(Some(Metadata::bare(false)))
    );
    assert_eq!(parse("Cd", &text), Ok(None), "another stream's");
    assert_eq!(parse("Ab", ""), Ok(None));
    assert_eq!(parse("Ab", "some other tool"), Ok(None));
    assert!(is_ours("Ab", &text) && !is_ours("Cd", &text));
}

#[test]
fn a_reference_round_trips() {
    let metadata = Metadata {
        gap_free: false,
        runs: Runs::Stored(stored(u64::from(u32::MAX) * 7)),
        marks: Vec::new(),
    };
    let text = encode("Ab", &metadata);
    assert!(text.starts_with("idemgate/3 Ab gaps r=12a03."), "{text}");
    assert!(text.len() < 120, "{} bytes: {text}", text.len());
    assert_eq!(parse("Ab", &text), Ok(Some(metadata)));
}

#[test]
fn what_replicas_before_it_wrote_reads_the_same() {
    let metadata = Metadata {
        gap_free: true,
        runs: Runs::Inline(vec![(10, 12), (15, 16)]),
        marks: Vec::new(),
    };
    for old in [
        "idemgate/2 Ab gap-free d=a.2,3.1",
        "idemgate/2 Ab gap-free done=10-12,15-16",
    ] {
        assert_eq!(parse("Ab", old), Ok(Some(metadata.clone())), "{old}");
    }
    assert_eq!(
        parse("Ab", "idemgate/2 Ab gaps"),
        Ok(Some(Metadata::bare(false)))
    );
    assert_eq!(parse("Cd", "idemgate/2 Ab gaps"), Ok(None));
}

#[test]
fn malformed_metadata_of_the_stream_is_refused() {
    let digest = hex::encode(digest(b"x"));
    for bad in [
        "idemgate/3 Ab".to_string(),
        "idemgate/3 Ab maybe".to_string(),
        "idemgate/3 Ab gaps d=".to_string(),
        "idemgate/3 Ab gaps d=a.2,x".to_string(),
        "idemgate/3 Ab gaps d=a.0".to_string(),
        "idemgate/3 Ab gaps d=a.2 d=1.1".to_string(),
        "idemgate/3 Ab gaps e=1".to_string(),
        format!("idemgate/3 Ab gaps r=zz.1.{digest}"),
        format!("idemgate/3 Ab gaps r=1a.1.{}", &digest[..62]),
        format!("idemgate/3 Ab gaps r=1a.1.{digest}.3"),
        format!("idemgate/3 Ab gaps d=1.1 r=1a.1.{digest}"),
        format!("idemgate/3 Ab gaps m=1 r=1a.1.{digest}"),
        "idemgate/3 Ab gaps m=".to_string(),
        "idemgate/3 Ab gaps m=1,,2".to_string(),
        "idemgate/3 Ab gaps m=0.7".to_string(),
        "idemgate/3 Ab gaps m=1 m=2".to_string(),
    ] {
        let refused = parse("Ab", &bad);
        assert!(refused.is_err(), "{bad}: {refused:?}");
        assert!(is_ours("Ab", &bad), "{bad}");
    }
}

#[test]
fn progress_marks_follow_the_runs_and_round_trip() {
    let read = parse("Ab", "idemgate/3 Ab gap-free d=a.2 m=0,7,z,10").unwrap();
    assert_eq!(
        read,
        Some(Metadata {
            gap_free: true,
            runs: Runs::Inline(vec![(10, 12)]),
            marks: vec![0, 7, 35, 36],
        })
    );
    let stored = Metadata {
        gap_free: false,
        runs: Runs::Stored(stored(9)),
        marks: vec![u64::from(u32::MAX); 64],
    };
    let text = encode("Ab", &stored);
    assert_eq!(parse("Ab", &text), Ok(Some(stored)));
    // The committers append the word to what `inline` wrote.
    let inline = inline("Ab", true, &[(10, 12)]).unwrap() + &marks_word(&[1, 2]);
    assert_eq!(inline, "idemgate/3 Ab gap-free d=a.2 m=1,2");
    assert_eq!(marks_word(&[]), "");
}

#[test]
fn inline_runs_leave_room_for_the_widest_marks() {
    let widest = marks_word(&[u64::MAX; 64]);
    assert!(widest.len() <= MARKS_ROOM, "{}", widest.len());
    let mut runs = Vec::new();
    let mut at = 4_000_000_000_i64;
    while let Some(text) = inline("Ab", false, &runs) {
        assert!(text.len() + widest.len() <= MAX_LEN);
        runs.push((at, at + 5));
        at += 7;
    }
    assert!(runs.len() > 500, "{} runs fit", runs.len());
}

#[test]
fn seven_hundred_holes_at_offsets_in_the_billions_fit_inline() {
    // A partition at offset 4 billion with 700 waiting copies between
    // finished runs: every run fits in the limit.
    let base = 4_000_000_000_i64;
    let runs: Vec<_> = (0..700).map(|i| (base + i * 7, base + i * 7 + 5)).collect();
    let text = inline("Ab", false, &runs).expect("fits");
    assert!(text.len() <= MAX_LEN, "{}", text.len());
    assert_eq!(
        parse("Ab", &text).unwrap().map(|m| m.runs),
        Some(Runs::Inline(runs))
    );
}

#[test]
fn five_thousand_runs_do_not_fit_inline_and_their_record_reads_back_whole() {
    let runs: Vec<_> = (0..5000).map(|i| (i * 1000, i * 1000 + 1)).collect();
    assert_eq!(inline("Ab", false, &runs), None);
    let content = runs_text(&runs);
    assert_eq!(parse_runs(&content), Ok(runs));
    assert_eq!(parse_runs(""), Ok(Vec::new()));
    assert!(parse_runs("1.1,,2.2").is_err());
    assert_ne!(digest(content.as_bytes()), digest(b"1.1"));
}

use super::*;
use crate::ops::reset::text::text;

fn seen(partition: i32, committed: Option<i64>, watermark: Option<i64>) -> Seen {
    Seen {
        topic: "raw".into(),
        partition,
        committed,
        low: 0,
        high: 100,
        at_time: Some(40),
        watermark,
    }
}

fn request(target: Target, skipped: Option<Skipped>, re_emit: bool) -> Request {
    Request {
        stream: "bank".into(),
        group: "idemgate".into(),
        target,
        skipped,
        re_emit,
        resume_at_end: false,
    }
}

#[test]
fn offsets_parse_as_one_for_all_or_per_partition_and_bad_ones_name_the_flag() {
    assert_eq!(parse_offsets("42"), Ok(Target::Offset(42)));
    let Ok(Target::Offsets(named)) = parse_offsets("raw.bank:0=5, raw.bank:1=7") else {
        panic!("per partition");
    };
    assert_eq!(named.get(&("raw.bank".into(), 1)), Some(&7));
    for bad in ["-1", "raw:x=1", "raw=1", "raw:0=1,raw:0=2", ""] {
        let error = parse_offsets(bad).unwrap_err().to_string();
        assert!(error.starts_with("--to-offset"), "{bad}: {error}");
    }
    use clap::ValueEnum;
    assert_eq!(
        Skipped::from_str("abandoned", false),
        Ok(Skipped::Abandoned)
    );
    assert!(Skipped::from_str("lost", false).is_err());
}

#[test]
fn a_forward_skip_needs_a_choice_and_records_it() {
    let parts = [seen(0, Some(10), Some(10)), seen(1, Some(60), Some(60))];
    let error = plan(&request(Target::Offset(50), None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(error.contains("--skipped"), "{error}");
    assert!(error.starts_with("raw:0"), "{error}");
    let p = plan(
        &request(Target::Offset(50), Some(Skipped::Abandoned), false),
        &parts,
    )
    .unwrap();
    assert_eq!(p.partitions[0].change, Change::Forward);
    assert_eq!(p.partitions[0].abandon, Some((10, 50)));
    assert_eq!(p.partitions[0].raise_to, None);
    assert_eq!(p.partitions[1].change, Change::Backward);
    assert_eq!(p.partitions[1].replay, None);
    let p = plan(
        &request(Target::Offset(50), Some(Skipped::Delivered), false),
        &parts,
    )
    .unwrap();
    assert_eq!(p.partitions[0].raise_to, Some(50));
    assert_eq!(p.partitions[0].abandon, None);
    assert!(text(&p, "idemgate", Mode::DryRun).contains("LOSS"));
}

#[test]
fn a_re_emitting_replay_covers_up_to_the_watermark() {
    let parts = [seen(0, Some(30), Some(35)), seen(1, None, None)];
    let p = plan(&request(Target::Earliest, None, true), &parts).unwrap();
    assert_eq!(p.partitions[0].replay, Some((0, 35)));
    // No commit: it resumes at the log start, where the reset goes.
    assert_eq!(p.partitions[1].change, Change::Unchanged);
    assert_eq!(p.partitions[1].replay, None);
    let later = [seen(0, Some(50), Some(50))];
    let p = plan(&request(Target::Time(0), None, false), &later).unwrap();
    assert_eq!(p.partitions[0].after, 40);
    assert_eq!(p.partitions[0].change, Change::Backward);
    assert_eq!(p.partitions[0].replay, None);
    assert!(text(&p, "idemgate", Mode::Execute).contains("nothing produced again"));
}

#[test]
fn every_partition_must_be_named_and_inside_its_log() {
    let parts = [seen(0, Some(10), None), seen(1, Some(10), None)];
    let one = parse_offsets("raw:0=5").unwrap();
    let error = plan(&request(one, None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(error.contains("raw:1 is not named"), "{error}");
    let other = parse_offsets("raw:0=5,raw:1=5,other:0=1").unwrap();
    let error = plan(&request(other, None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("other:0 is not an input partition"),
        "{error}"
    );
    let error = plan(&request(Target::Offset(101), None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(error.contains("outside its log"), "{error}");
}

#[test]
fn shift_by_stays_inside_the_log_as_kafkas_tool_and_needs_a_commit() {
    let mut low = seen(0, Some(30), Some(30));
    low.low = 20;
    let parts = [low, seen(1, Some(90), Some(90))];
    let p = plan(&request(Target::ShiftBy(-15), None, true), &parts).unwrap();
    assert_eq!(p.partitions[0].after, 20, "kept at the log start");
    assert_eq!(p.partitions[0].clamped_from, Some(15));
    assert_eq!(p.partitions[1].after, 75);
    assert_eq!(p.partitions[1].clamped_from, None);
    // The store's ranges are those of any backward reset.
    assert_eq!(p.partitions[0].replay, Some((20, 30)));
    assert_eq!(p.partitions[1].replay, Some((75, 90)));
    assert!(text(&p, "idemgate", Mode::DryRun).contains("shifted to 15, kept at the log's start"));
    let p = plan(
        &request(Target::ShiftBy(50), Some(Skipped::Abandoned), false),
        &parts,
    )
    .unwrap();
    assert_eq!(p.partitions[0].after, 80);
    assert_eq!(p.partitions[1].after, 100, "kept at the log end");
    assert_eq!(p.partitions[1].abandon, Some((90, 100)));
    let error = plan(
        &request(Target::ShiftBy(1), None, false),
        &[seen(0, None, None)],
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.starts_with("--shift-by: raw:0 has no committed"),
        "{error}"
    );
}

#[test]
fn latest_is_a_forward_skip_that_needs_a_choice() {
    let parts = [seen(0, Some(60), Some(60)), seen(1, None, None)];
    let error = plan(&request(Target::Latest, None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(error.contains("--skipped"), "{error}");
    let p = plan(
        &request(Target::Latest, Some(Skipped::Delivered), false),
        &parts,
    )
    .unwrap();
    assert_eq!(p.partitions[0].after, 100);
    assert_eq!(p.partitions[0].raise_to, Some(100));
    assert_eq!(p.partitions[1].raise_to, Some(100));
}

#[test]
fn a_file_plan_takes_the_groups_rows_and_every_partition_must_be_named() {
    use crate::ops::reset::csv::Rows;
    let parts = [seen(0, Some(50), None), seen(1, Some(50), None)];
    let rows = Rows::parse(
        "f.csv",
        "idemgate,raw,0,10\nother,raw,0,99\nidemgate,raw,1,60\n",
    )
    .unwrap();
    let p = plan(
        &request(Target::File(rows), Some(Skipped::Abandoned), false),
        &parts,
    )
    .unwrap();
    assert_eq!(p.partitions[0].after, 10);
    assert_eq!(p.partitions[1].after, 60);
    assert_eq!(p.partitions[1].abandon, Some((50, 60)));
    assert_eq!(p.other_groups, vec!["other".to_string()]);
    assert!(
        text(&p, "idemgate", Mode::DryRun).contains("rows of other groups were left alone (other)")
    );
    let one = Rows::parse("f.csv", "raw,0,10\n").unwrap();
    let error = plan(&request(Target::File(one), None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("--from-file: raw:1 is not named"),
        "{error}"
    );
    let outside = Rows::parse("f.csv", "raw,0,10\nraw,1,101\n").unwrap();
    let error = plan(&request(Target::File(outside), None, false), &parts)
        .unwrap_err()
        .to_string();
    assert!(error.contains("outside its log"), "{error}");
}

//! Unit tests of tier 2's commands: a full RedisBloom generation's refused
//! items go to its overflow part, and a round probes only the overflow parts
//! not known absent.

use super::*;

fn write(n: u8) -> BloomWrite {
    BloomWrite {
        stream: 0,
        epoch: 7,
        overflow: "p:sm:f:7:x".into(),
        capacity: 100,
        fp_rate: 1e-3,
        ttl_ms: 1000,
        hashes: (0..n).map(|i| SourceHash([i; 32])).collect(),
    }
}

/// What RedisBloom answers for an item a full generation refused.
fn full() -> Value {
    redis::parse_redis_value(b"-ERR non scaling filter is full\r\n").unwrap()
}

#[test]
fn every_item_from_the_first_refusal_on_goes_to_the_overflow() {
    // RedisBloom answers up to its first refusal and stops there.
    let answer = Ok(Value::Array(vec![Value::Int(1), full()]));
    let refused = refused(&write(4), answer).unwrap().unwrap();
    assert_eq!(
        refused,
        vec![
            SourceHash([1; 32]),
            SourceHash([2; 32]),
            SourceHash([3; 32])
        ]
    );
    let taken = Ok(Value::Array(vec![Value::Int(1), Value::Int(0)]));
    assert_eq!(refused_of(taken, 2), None);
    let short = Ok(Value::Array(vec![Value::Int(1)]));
    assert!(super::refused(&write(2), short).is_err());
}

fn refused_of(answer: RedisResult<Value>, n: u8) -> Option<Vec<SourceHash>> {
    refused(&write(n), answer).unwrap()
}

fn keys(commands: &[Keyed]) -> Vec<String> {
    commands
        .iter()
        .map(|c| String::from_utf8_lossy(&c.key).to_string())
        .collect()
}

#[test]
fn an_overflow_part_found_absent_is_left_out_of_the_next_probes() {
    // One hour per generation, two live: an item at 1.5 h reads
    // epochs 0 and 1.
    let plan = GenerationPlan {
        horizon: std::time::Duration::from_secs(3600),
        slots: 2,
        skew: std::time::Duration::ZERO,
        sizing: crate::store::FilterSizing::new(100, 1e-3),
    };
    let hash = SourceHash([7; 32]);
    let items = [Item {
        index: 0,
        stream: 3,
        key_id: "sm",
        plan: &plan,
        hash: &hash,
        at: 5_400_000,
    }];
    let backend = FilterBackend::RedisBloom;
    let (none, clear, follow_up): (Clear, Clear, HashSet<_>) =
        (Clear::new(), [(3, 0), (4, 1)].into(), [(3, 0)].into());
    let all = |want| keys(&probes(backend, "p:", &items, want).0);
    assert_eq!(
        all(Want::Round(&none)),
        ["p:sm:f:0", "p:sm:f:0:x", "p:sm:f:1", "p:sm:f:1:x"]
    );
    // Stream 3's epoch 0 is known clear; (4, 1) is another stream's.
    assert_eq!(
        all(Want::Round(&clear)),
        ["p:sm:f:0", "p:sm:f:1", "p:sm:f:1:x"]
    );
    assert_eq!(all(Want::Overflow(&follow_up)), ["p:sm:f:0:x"]);
    let (reads, read) = overflow_reads(backend, "p:", &items);
    assert_eq!(keys(&reads), ["p:sm:f:0:x", "p:sm:f:1:x"]);
    assert_eq!(read, [(3, 0), (3, 1)]);
    assert!(exists(Ok(Value::Int(1))).unwrap());
    assert!(!exists(Ok(Value::Int(0))).unwrap());
    assert!(exists(Ok(Value::Nil)).is_err());
    // Bitmaps have no overflow part: nothing to ask.
    assert!(overflow_reads(FilterBackend::Bitmap, "p:", &items)
        .0
        .is_empty());
}

#[test]
fn the_overflow_part_is_scaling_and_expires_with_its_generation() {
    let commands = overflow(&write(2), &[SourceHash([5; 32])]);
    let packed = String::from_utf8_lossy(&commands[0].cmd.get_packed_command()).to_string();
    assert!(
        packed.contains("p:sm:f:7:x") && !packed.contains("NONSCALING"),
        "{packed}"
    );
    let expiry = String::from_utf8_lossy(&commands[1].cmd.get_packed_command()).to_string();
    assert!(expiry.contains("PEXPIRE") && expiry.contains("1000") && expiry.contains("NX"));
}

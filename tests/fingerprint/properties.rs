//! Properties of the canonical source hash: key order and spelling never
//! change it, a change in a listed field or a type always does.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use idemgate::fingerprint::*;
use proptest::prelude::*;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

use super::{hash, profile, run};

/// Any JSON value, nested a few levels, with strings that need escaping.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[a-zA-Z0-9 é\"\\\\\n]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            arb_object(inner).prop_map(Value::Object),
        ]
    })
}

fn arb_object(
    values: impl Strategy<Value = Value>,
) -> impl Strategy<Value = serde_json::Map<String, Value>> {
    prop::collection::btree_map("[a-z_]{0,4}", values, 0..6)
        .prop_map(|map| map.into_iter().collect())
}

/// Render JSON with object keys in an order drawn from `seed` (at every
/// level) and whitespace that depends on it too, as a different sender
/// would.
fn render(value: &Value, seed: u64, out: &mut String) {
    let space = if seed.is_multiple_of(3) { " " } else { "" };
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by_key(|(key, _)| {
                let mut hasher = DefaultHasher::new();
                (seed, key.as_str()).hash(&mut hasher);
                hasher.finish()
            });
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(space);
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push_str(space);
                out.push(':');
                render(item, seed.rotate_left(7) ^ 0x9e37_79b9, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                    out.push_str(space);
                }
                render(item, seed.rotate_left(13) ^ 0x7f4a_7c15, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn rendered(value: &Value, seed: u64) -> String {
    let mut out = String::new();
    render(value, seed, &mut out);
    out
}

/// A bank transaction's listed values, each drawn independently so one can
/// be swapped for another's.
#[derive(Clone, Debug)]
struct Txn {
    account: String,
    txn_id: String,
    /// Amount = units / 10^scale; at most 15 significant digits, so a JSON
    /// number spelling survives `f64` exactly.
    units: i64,
    scale: u32,
    currency: String,
    posted_at: i64,
}

prop_compose! {
    fn arb_txn()(
        account in "[A-Za-z0-9-]{1,10}",
        txn_id in "[A-Za-z0-9-]{1,10}",
        units in -99_999_999_999i64..99_999_999_999,
        scale in 0u32..=4,
        currency in "[A-Z]{3}",
        posted_at in 0i64..4_000_000_000,
    ) -> Txn {
        Txn { account, txn_id, units, scale, currency, posted_at }
    }
}

/// How a sender happens to spell a transaction: amount as a number or a
/// string with extra trailing zeros, currency case, posting time offset,
/// unlisted fields.
#[derive(Clone, Debug)]
struct Spelling {
    amount_as_string: bool,
    extra_zeros: usize,
    lower_currency: bool,
    offset_minutes: i32,
    extras: serde_json::Map<String, Value>,
}

prop_compose! {
    fn arb_spelling()(
        amount_as_string in any::<bool>(),
        extra_zeros in 0usize..4,
        lower_currency in any::<bool>(),
        offset_minutes in -12 * 60..=14 * 60,
        extras in arb_object(arb_json()),
    ) -> Spelling {
        Spelling { amount_as_string, extra_zeros, lower_currency, offset_minutes, extras }
    }
}

impl Txn {
    fn amount(&self) -> Decimal {
        Decimal::new(self.units, self.scale)
    }

    /// The listed values as the hash should see them (`Decimal` compares
    /// numerically).
    fn listed(&self) -> (&str, &str, Decimal, &str, i64) {
        let amount = self.amount();
        (
            &self.account,
            &self.txn_id,
            amount,
            &self.currency,
            self.posted_at,
        )
    }

    fn to_json(&self, spelling: &Spelling) -> Value {
        let mut amount = self.amount().to_string();
        if spelling.extra_zeros > 0 {
            if !amount.contains('.') {
                amount.push('.');
            }
            amount.push_str(&"0".repeat(spelling.extra_zeros));
        }
        let amount = if spelling.amount_as_string {
            Value::String(amount)
        } else {
            serde_json::from_str(&amount).unwrap()
        };
        let currency = if spelling.lower_currency {
            self.currency.to_lowercase()
        } else {
            self.currency.clone()
        };
        let offset = UtcOffset::from_whole_seconds(spelling.offset_minutes * 60).unwrap();
        let posted_at = OffsetDateTime::from_unix_timestamp(self.posted_at)
            .unwrap()
            .to_offset(offset)
            .format(&Rfc3339)
            .unwrap();
        let mut object = spelling.extras.clone();
        object.insert("account_id".into(), json!(self.account));
        object.insert("bank_txn_id".into(), json!(self.txn_id));
        object.insert("amount".into(), amount);
        object.insert("currency".into(), json!(currency));
        object.insert("posted_at".into(), json!(posted_at));
        Value::Object(object)
    }
}

/// `txn` with listed field `field` (0..5) taken from `other`.
fn swap_field(txn: &Txn, other: &Txn, field: usize) -> Txn {
    let mut changed = txn.clone();
    match field {
        0 => changed.account.clone_from(&other.account),
        1 => changed.txn_id.clone_from(&other.txn_id),
        2 => (changed.units, changed.scale) = (other.units, other.scale),
        3 => changed.currency.clone_from(&other.currency),
        _ => changed.posted_at = other.posted_at,
    }
    changed
}

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| serde_json::Number::from_f64(x).unwrap().to_string()),
    ]
}

proptest! {
    #[test]
    fn key_order_never_changes_a_payload_hash(
        object in arb_object(arb_json()),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let value = Value::Object(object);
        let payload = profile("payload");
        let a = run(&payload, &rendered(&value, seed_a)).unwrap();
        let b = run(&payload, &rendered(&value, seed_b)).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn key_order_never_changes_a_bank_txn_hash(
        txn in arb_txn(),
        spelling in arb_spelling(),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let value = txn.to_json(&spelling);
        let bank = profile("bank-txn");
        let a = run(&bank, &rendered(&value, seed_a)).unwrap();
        let b = run(&bank, &rendered(&value, seed_b)).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn spelling_never_changes_a_bank_txn_hash(
        txn in arb_txn(),
        spelling_a in arb_spelling(),
        spelling_b in arb_spelling(),
    ) {
        let bank = profile("bank-txn");
        prop_assert_eq!(
            hash(&bank, &txn.to_json(&spelling_a).to_string()),
            hash(&bank, &txn.to_json(&spelling_b).to_string())
        );
    }

    #[test]
    fn a_change_in_any_listed_field_changes_a_bank_txn_hash(
        txn in arb_txn(),
        other in arb_txn(),
        field in 0usize..5,
        spelling_a in arb_spelling(),
        spelling_b in arb_spelling(),
    ) {
        let changed = swap_field(&txn, &other, field);
        prop_assume!(changed.listed() != txn.listed());
        let bank = profile("bank-txn");
        prop_assert_ne!(
            hash(&bank, &txn.to_json(&spelling_a).to_string()),
            hash(&bank, &changed.to_json(&spelling_b).to_string())
        );
    }

    #[test]
    fn a_number_and_its_string_never_share_a_payload_hash(number in number_text()) {
        let payload = profile("payload");
        let quoted = format!("\"{number}\"");
        prop_assert_ne!(hash(&payload, &number), hash(&payload, &quoted));
        prop_assert_ne!(
            hash(&payload, &format!(r#"{{"n":{number}}}"#)),
            hash(&payload, &format!(r#"{{"n":{quoted}}}"#))
        );
    }

    #[test]
    fn a_number_and_its_string_never_share_an_object_hash(number in number_text()) {
        let object = Profile::resolve("fields", Some("params:object"), None).unwrap();
        let quoted = format!("\"{number}\"");
        prop_assert_ne!(
            hash(&object, &format!(r#"{{"params":{number}}}"#)),
            hash(&object, &format!(r#"{{"params":{quoted}}}"#))
        );
        prop_assert_ne!(
            hash(&object, &format!(r#"{{"params":{{"n":[{number}]}}}}"#)),
            hash(&object, &format!(r#"{{"params":{{"n":[{quoted}]}}}}"#))
        );
    }
}

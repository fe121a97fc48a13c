//! JSON numbers from their literal text (docs/design.md §3): what must hash
//! apart, what must agree, what is refused, and the hashes that must not
//! move.

use idemgate::fingerprint::*;

use super::LIMIT;

/// A record whose hash and digest were computed by the fingerprint before
/// numbers were read from their literal text (commit b45fa6a).
struct Pin {
    profile: &'static str,
    fields: Option<&'static str>,
    payload: &'static str,
    hash: &'static str,
    digest: &'static str,
}

/// Ordinary amounts, coordinates and parameters: numbers whose serde_json
/// text was already their exact value. Their claims live in stores today,
/// so a new build must hash them exactly as the old one did.
const PINS: &[Pin] = &[
    Pin {
        profile: "payload",
        fields: None,
        payload: r#"{"amount":100.5,"n":[12,-3.25,0.1,1e2,100.50,1.0,-0.0,0,1E-7,123456789012345678,18446744073709551615,-9223372036854775808,0.30000000000000004,1.5e300,2.5e-8,1234567.125,100000000000000000000000,-5e-324]}"#,
        hash: "32faa0081f7ddd13a00bfc4177a0cbeae96fe53202910f83ba4935c6bfcd50ed",
        digest: "9dafc85d8ed6690a",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":100.5,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "ef8072dc9c5163a9eb406f23f9d64b42618921a77246ce569a7e545d6544baa5",
        digest: "0e5b4df6234256c4",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":12,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "68aa68d9311fb992b86eb1c6b1ff5afd3bb33e02cf08f33abc4e18ee4b8f9982",
        digest: "ed143b983101a18c",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":-3.25,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "73c01319ceecb74e343034efc42134f5e13beea5addaed3eda25cede134014b8",
        digest: "8fce57e9766e1a32",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":0.1,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "5224438b183cfa64f835afdc554cab695f50b4aad44831d39200469ee8a9b04e",
        digest: "3af8edced90411f9",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":1e2,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "641ffe515b5e6808819e596301394d1c6ea02dc2b4a467f0bad4b1ea6aca5c90",
        digest: "a4c60fa68659d62f",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":100.50,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "ef8072dc9c5163a9eb406f23f9d64b42618921a77246ce569a7e545d6544baa5",
        digest: "0e5b4df6234256c4",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":"100.50","currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "ef8072dc9c5163a9eb406f23f9d64b42618921a77246ce569a7e545d6544baa5",
        digest: "0e5b4df6234256c4",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":123456789012345678,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "fbf3e12f65663e8b325bb9db69ed3cdc5863e1362d2b7934ccbacecd1427bb17",
        digest: "d52d5afb19d374fa",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":1234567.89,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "720270aa3fb1d91e84b7b00e3b1c27fd7e6640293ff2f8fda5892f61e28a154c",
        digest: "3e782a6d4adb2762",
    },
    Pin {
        profile: "spatial-job",
        fields: None,
        payload: r#"{"bbox":[-74.5,40.1,-73.9,40.9],"crs":"epsg:4326","params":{"res":10,"scale":0.5,"t":1.0}}"#,
        hash: "a8fe0d231773be166f450e364b36ecef2f086775df0efd7a5f31ffaa588b330b",
        digest: "5f5a1e8d3fb27226",
    },
    Pin {
        profile: "spatial-job",
        fields: None,
        payload: r#"{"bbox":[-74.0059731,40.7127753,-73.9,40.1234565],"crs":"EPSG:3857","params":{}}"#,
        hash: "c91c1a5322a7e914303fc016efce0d485ec89f1112bd50596b0bf05e3af207e4",
        digest: "a8339b8bad12bd2b",
    },
    Pin {
        profile: "fields",
        fields: Some("o:object,v:round:2"),
        payload: r#"{"o":{"x":1e2,"y":-0.0,"z":1.0,"w":[0.1,2]},"v":2.675}"#,
        hash: "0429028b382463ecf03e43ced36d65259a84c5bdfb265f07c2bfeb4e28f69ab9",
        digest: "f0bde0e1957b4afc",
    },
    Pin {
        profile: "header",
        fields: None,
        payload: r#"{"job":7,"w":0.5,"big":1e23}"#,
        hash: "e7b3d2f045281b75e3ebb76d87dc666a4b763252ea7abe6c824edfc05b897d39",
        digest: "69b7eb57d055f91a",
    },
];

#[test]
fn ordinary_numbers_keep_the_hashes_and_digests_they_had() {
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"job-1"))];
    for pin in PINS {
        let profile = Profile::resolve(pin.profile, pin.fields, None).unwrap();
        let view = RecordView {
            payload: Some(pin.payload.as_bytes()),
            headers,
        };
        for print in [
            fingerprint(&profile, LIMIT, &view),
            fingerprint_reference(&profile, LIMIT, &view),
        ] {
            let print = print.unwrap();
            assert_eq!(print.hash.to_string(), pin.hash, "{}", pin.payload);
            assert_eq!(print.digest.to_string(), pin.digest, "{}", pin.payload);
        }
    }
}

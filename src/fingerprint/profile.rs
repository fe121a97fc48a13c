//! Profiles: which part of a record is its identity, and which payload
//! fields its digest leaves out, resolved from the stream's configuration
//! (`profile`, `fields`, `header`, `ignore`).
//!
//! Resolution is where every configuration mistake is caught, so that
//! [`fingerprint`](super::fingerprint) only ever fails because of the record.

use std::collections::BTreeSet;

use super::ignore;

/// Header read by the `header` profile when the stream names none.
pub(crate) const DEFAULT_HEADER: &str = "x-idempotency-key";

/// The most decimal places `round:N` accepts: rust_decimal's maximum scale.
pub(crate) const MAX_ROUND_PLACES: u32 = 28;

/// How one field's value is brought to a canonical form, so that two
/// spellings of the same value hash alike and different values never do.
#[derive(Clone, Debug, PartialEq)]
pub enum Normaliser {
    /// An exact decimal (JSON string or number) through rust_decimal with
    /// trailing zeros stripped: "100.50", "100.5000" and 100.5 agree. A
    /// JSON number is read from its literal text, never through `f64`, so
    /// `1.000000000000000001` as a number is that amount, and agrees with
    /// the string "1.000000000000000001". A value rust_decimal cannot hold
    /// exactly (more than 28 decimal places, or past its 96-bit range,
    /// about 28 digits) is refused (`inexact-decimal`), never rounded.
    Decimal,
    /// A JSON string, kept byte for byte.
    String,
    /// A JSON string, upper-cased (Unicode rules): codes such as currencies
    /// or CRS names arrive in either case.
    Upper,
    /// A JSON string, lower-cased (Unicode rules).
    Lower,
    /// An RFC 3339 timestamp, normalised to UTC, so one instant written with
    /// two offsets agrees.
    Timestamp,
    /// A number or an array of numbers, each rounded to this many decimal
    /// places (half away from zero) and stripped of trailing zeros. The
    /// number is read from its literal text, so the rounding is that of its
    /// exact value however many digits it has (at 28 places, what lies
    /// below 1e-28 is cut); a result past rust_decimal's range is refused
    /// (`inexact-decimal`).
    Round(u32),
    /// Any JSON value in canonical form (keys sorted, no whitespace).
    Object,
}

/// One field of the `fields` profile: a dotted path into the payload object
/// and how its value is normalised.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSpec {
    /// Dotted path (`a.b` is key `b` of the object at key `a`); also the key
    /// of the field in the canonical form.
    pub(crate) name: String,
    /// How the value is normalised before hashing.
    pub(crate) normaliser: Normaliser,
}

/// Which part of a record is its identity.
#[derive(Clone, Debug, PartialEq)]
pub enum Identity {
    /// The value of a header, so a job submitted synchronously and replayed
    /// asynchronously collapse onto the key its sender chose.
    Header {
        /// Header name, matched exactly; the first header with it counts.
        name: String,
    },
    /// The Kafka record key's bytes as they are (Redpanda Connect's dedupe
    /// default): for producers that key each event by its own id. A record
    /// without a key, or with an empty one, is `invalid`, never a duplicate
    /// of every other such record.
    RecordKey,
    /// Listed JSON fields, each normalised.
    Fields(Vec<FieldSpec>),
    /// The whole payload.
    Payload {
        /// `false`: canonical JSON of the payload (which must be JSON);
        /// `true`: the bytes as they are, for non-JSON streams.
        raw: bool,
    },
}

/// A stream's profile: what identifies a record, and which payload fields
/// the payload digest leaves out (so a retry that differs only in them is
/// a `duplicate`, not a `conflict`).
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Which part of a record is its identity.
    pub(crate) identity: Identity,
    /// Dotted paths removed from a JSON payload before it is digested (and,
    /// under `payload`, before it is hashed): fields such as `attempt` or
    /// `status` that a sender changes from one retry to the next. Never
    /// nests in (or holds) a listed field; empty for `payload-raw`.
    pub(crate) ignore: Vec<String>,
}

impl From<Identity> for Profile {
    /// The identity with nothing ignored: the hashes and digests it always
    /// gave.
    fn from(identity: Identity) -> Profile {
        Profile {
            identity,
            ignore: Vec::new(),
        }
    }
}

/// A stream's profile settings cannot be resolved. Raised at configuration
/// time, never per record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The profile name is none of the known ones.
    #[error(
        "unknown profile `{name}` (expected header, record-key, payload, payload-raw, bank-txn, spatial-job or fields)"
    )]
    UnknownProfile { name: String },
    /// Profile `fields` was named without a field list.
    #[error("profile `fields` needs a field list, e.g. \"account_id,amount:decimal\"")]
    FieldsRequired,
    /// A field list was given to a profile that has its own (or none).
    #[error("profile `{profile}` takes no field list")]
    FieldsNotAllowed { profile: String },
    /// A header name was given to a profile that reads no header.
    #[error("profile `{profile}` takes no header name")]
    HeaderNotAllowed { profile: String },
    /// The header name is empty.
    #[error("header name is empty")]
    EmptyHeaderName,
    /// One entry of the field list is malformed.
    #[error("bad field spec `{spec}`: {reason}")]
    BadFieldSpec { spec: String, reason: &'static str },
    /// The normaliser named in a field spec does not exist.
    #[error(
        "unknown normaliser `{normaliser}` in field spec `{spec}` (expected decimal, string, upper, lower, timestamp, round:N or object)"
    )]
    UnknownNormaliser { spec: String, normaliser: String },
    /// The same field is listed twice: the canonical form has one slot per
    /// name, so the second entry would silently win.
    #[error("field `{field}` is listed twice")]
    DuplicateField { field: String },
    /// `ignore` was given to `payload-raw`, whose digest is the payload's
    /// bytes: there is no field to leave out.
    #[error("profile `{profile}` digests the payload's bytes: it has no fields to ignore")]
    IgnoreNotAllowed { profile: String },
    /// One entry of the ignore list is malformed.
    #[error("bad ignore path `{path}`: {reason}")]
    BadIgnore { path: String, reason: &'static str },
    /// The same path is ignored twice.
    #[error("`{path}` is ignored twice")]
    DuplicateIgnore { path: String },
    /// An ignored path is a listed field, or one nests in the other: a
    /// field in the hash cannot be left out of the digest.
    #[error("ignored `{path}` overlaps the listed field `{field}`: a field in the hash cannot be left out of the digest")]
    IgnoredField { path: String, field: String },
}

impl ProfileError {
    /// The stream setting the error is about, for the config's message
    /// (`streams[0].ignore: ...`).
    pub fn field(&self) -> &'static str {
        match self {
            ProfileError::UnknownProfile { .. } => "profile",
            ProfileError::FieldsRequired
            | ProfileError::FieldsNotAllowed { .. }
            | ProfileError::BadFieldSpec { .. }
            | ProfileError::UnknownNormaliser { .. }
            | ProfileError::DuplicateField { .. } => "fields",
            ProfileError::HeaderNotAllowed { .. } | ProfileError::EmptyHeaderName => "header",
            ProfileError::IgnoreNotAllowed { .. }
            | ProfileError::BadIgnore { .. }
            | ProfileError::DuplicateIgnore { .. }
            | ProfileError::IgnoredField { .. } => "ignore",
        }
    }
}

impl Profile {
    /// Resolve a profile by name: "header", "record-key", "payload",
    /// "payload-raw", "bank-txn", "spatial-job", "fields"; nothing ignored
    /// (see [`Profile::ignoring`]).
    ///
    /// `fields` is the field list for "fields" (and refused for the others),
    /// e.g. "account_id,amount:decimal,bbox:round:6,crs:upper,params:object";
    /// a field without a normaliser uses `string`. `header` overrides the
    /// header name for "header" (and is refused for the others). Settings
    /// that would be ignored are refused rather than dropped, because an
    /// operator who wrote them expected them to matter.
    pub fn resolve(
        name: &str,
        fields: Option<&str>,
        header: Option<&str>,
    ) -> Result<Profile, ProfileError> {
        if name != "fields" && fields.is_some() {
            return Err(ProfileError::FieldsNotAllowed {
                profile: name.to_owned(),
            });
        }
        if name != "header" && header.is_some() {
            return Err(ProfileError::HeaderNotAllowed {
                profile: name.to_owned(),
            });
        }
        let identity = match name {
            "header" => {
                let name = header.unwrap_or(DEFAULT_HEADER);
                if name.is_empty() {
                    return Err(ProfileError::EmptyHeaderName);
                }
                Ok(Identity::Header {
                    name: name.to_owned(),
                })
            }
            "record-key" => Ok(Identity::RecordKey),
            "payload" => Ok(Identity::Payload { raw: false }),
            "payload-raw" => Ok(Identity::Payload { raw: true }),
            "bank-txn" => Ok(Identity::Fields(bank_txn())),
            "spatial-job" => Ok(Identity::Fields(spatial_job())),
            "fields" => match fields {
                Some(list) => parse_field_list(list).map(Identity::Fields),
                None => Err(ProfileError::FieldsRequired),
            },
            other => Err(ProfileError::UnknownProfile {
                name: other.to_owned(),
            }),
        };
        identity.map(Profile::from)
    }

    /// The profile with these payload fields (dotted paths) left out of
    /// the digest, and under `payload` out of the hash too; an empty list
    /// changes nothing. Refused for `payload-raw` (bytes have no fields),
    /// for a path given twice, and for a path that is a listed field or
    /// nests in one (or holds one).
    pub fn ignoring(self, paths: &[String]) -> Result<Profile, ProfileError> {
        let listed: &[FieldSpec] = match &self.identity {
            Identity::Payload { raw: true } if !paths.is_empty() => {
                return Err(ProfileError::IgnoreNotAllowed {
                    profile: "payload-raw".to_owned(),
                })
            }
            Identity::Fields(specs) => specs,
            _ => &[],
        };
        let ignore = ignore::parse(paths, listed)?;
        Ok(Profile { ignore, ..self })
    }

    /// What identifies a record.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The payload fields the digest leaves out.
    pub fn ignored(&self) -> &[String] {
        &self.ignore
    }

    /// The header the profile reads, if it reads one.
    pub fn header_name(&self) -> Option<&str> {
        match &self.identity {
            Identity::Header { name } => Some(name),
            _ => None,
        }
    }
}

pub(super) fn spec(name: &str, normaliser: Normaliser) -> FieldSpec {
    FieldSpec {
        name: name.to_owned(),
        normaliser,
    }
}

/// Preset `bank-txn`: a bank transaction is its account, the bank's own
/// transaction id, the amount (string or number), the currency and the
/// posting time.
pub(super) fn bank_txn() -> Vec<FieldSpec> {
    vec![
        spec("account_id", Normaliser::String),
        spec("bank_txn_id", Normaliser::String),
        spec("amount", Normaliser::Decimal),
        spec("currency", Normaliser::Upper),
        spec("posted_at", Normaliser::Timestamp),
    ]
}

/// Preset `spatial-job`: a spatial job is its area (to about 0.1 m), its
/// coordinate system and its parameters.
pub(super) fn spatial_job() -> Vec<FieldSpec> {
    vec![
        spec("bbox", Normaliser::Round(6)),
        spec("crs", Normaliser::Upper),
        spec("params", Normaliser::Object),
    ]
}

/// Parse "name[:normaliser[:arg]],..." (whitespace around entries ignored).
fn parse_field_list(list: &str) -> Result<Vec<FieldSpec>, ProfileError> {
    let mut seen = BTreeSet::new();
    let mut specs = Vec::new();
    for raw in list.split(',') {
        let field = parse_field_spec(raw.trim())?;
        if !seen.insert(field.name.clone()) {
            return Err(ProfileError::DuplicateField { field: field.name });
        }
        specs.push(field);
    }
    Ok(specs)
}

fn parse_field_spec(text: &str) -> Result<FieldSpec, ProfileError> {
    let bad = |reason| ProfileError::BadFieldSpec {
        spec: text.to_owned(),
        reason,
    };
    if text.is_empty() {
        return Err(bad("empty entry"));
    }
    let mut parts = text.split(':');
    let name = parts.next().unwrap_or_default();
    if name.is_empty() {
        return Err(bad("empty field name"));
    }
    if name.split('.').any(str::is_empty) {
        return Err(bad("empty segment in dotted path"));
    }
    if name.chars().any(char::is_whitespace) {
        return Err(bad("whitespace in field name"));
    }
    let kind = parts.next();
    let arg = parts.next();
    if parts.next().is_some() {
        return Err(bad("too many `:` parts"));
    }
    let normaliser = match (kind, arg) {
        (None, _) => Normaliser::String,
        (Some("round"), Some(places)) => {
            Normaliser::Round(parse_places(places).ok_or_else(|| {
                bad("round:N needs N, a whole number of decimal places from 0 to 28")
            })?)
        }
        (Some("round"), None) => return Err(bad("round needs a number of places, as in round:6")),
        (Some(_), Some(_)) => return Err(bad("only round takes an argument")),
        (Some(kind), None) => match kind {
            "decimal" => Normaliser::Decimal,
            "string" => Normaliser::String,
            "upper" => Normaliser::Upper,
            "lower" => Normaliser::Lower,
            "timestamp" => Normaliser::Timestamp,
            "object" => Normaliser::Object,
            other => {
                return Err(ProfileError::UnknownNormaliser {
                    spec: text.to_owned(),
                    normaliser: other.to_owned(),
                })
            }
        },
    };
    Ok(FieldSpec {
        name: name.to_owned(),
        normaliser,
    })
}

/// Decimal places for `round:N`: plain ASCII digits only (no sign), at most
/// [`MAX_ROUND_PLACES`].
fn parse_places(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u32>()
        .ok()
        .filter(|places| *places <= MAX_ROUND_PLACES)
}

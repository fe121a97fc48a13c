//! `idemgate hash`: one record's source hash (and payload digest) as the
//! worker computes it.

use std::io::Read;

use anyhow::{bail, Context};
use clap::ValueEnum;

use crate::fingerprint::{fingerprint, Identity, Profile, RecordView};

/// The profiles and presets a stream's `profile` names, spelled as there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileName {
    /// The idempotency header's value (--key; --header names it).
    Header,
    /// The record's key (--key).
    RecordKey,
    /// The payload fields --fields lists, each normalised.
    Fields,
    /// The whole JSON payload, canonicalised.
    Payload,
    /// The payload's bytes as they are.
    PayloadRaw,
    /// Preset: a bank transaction's identifying fields.
    BankTxn,
    /// Preset: a spatial job's identifying fields.
    SpatialJob,
}

impl ProfileName {
    /// The name as a config and the command line write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileName::Header => "header",
            ProfileName::RecordKey => "record-key",
            ProfileName::Fields => "fields",
            ProfileName::Payload => "payload",
            ProfileName::PayloadRaw => "payload-raw",
            ProfileName::BankTxn => "bank-txn",
            ProfileName::SpatialJob => "spatial-job",
        }
    }
}

#[derive(clap::Args)]
pub struct HashArgs {
    /// The stream profile to hash with.
    #[arg(long, value_enum)]
    pub profile: ProfileName,
    /// For `fields`: `name:normaliser` pairs, comma separated.
    #[arg(long)]
    pub fields: Option<String>,
    /// For `header`: the header's name (default x-idempotency-key).
    #[arg(long, requires = "key")]
    pub header: Option<String>,
    /// For `header`: the header's value; for `record-key`: the record's
    /// key, as text (stdin is then the payload).
    #[arg(long, allow_hyphen_values = true)]
    pub key: Option<String>,
    /// Payload fields left out of the digest (and under `payload` the
    /// hash), comma separated: a stream's `ignore`.
    #[arg(long, value_delimiter = ',')]
    pub ignore: Vec<String>,
    /// Also print the payload digest, after a tab: two records with one
    /// hash are a `duplicate` when their digests match, a `conflict` when
    /// they differ. Without it the output is the hash alone.
    #[arg(long)]
    pub digest: bool,
    /// Records larger than this are invalid.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_bytes: usize,
}

impl HashArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let profile = Profile::resolve(
            self.profile.as_str(),
            self.fields.as_deref(),
            self.header.as_deref(),
        )?
        .ignoring(&self.ignore)?;
        let mut payload = Vec::new();
        std::io::stdin()
            .read_to_end(&mut payload)
            .context("reading the record from stdin")?;
        let key = self.key.as_deref().map(str::as_bytes);
        let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::new();
        let mut record_key = None;
        match profile.identity() {
            Identity::Header { name } => headers.extend(key.map(|v| (name.as_str(), Some(v)))),
            Identity::RecordKey => record_key = key,
            _ if key.is_some() => bail!(
                "--key is the header's value for --profile header and the record's key for \
                 --profile record-key; profile {} reads stdin only",
                self.profile.as_str()
            ),
            _ => {}
        }
        let record = RecordView {
            key: record_key,
            payload: Some(trim_newline(&payload)),
            headers: &headers,
        };
        let print = fingerprint(&profile, self.max_bytes, &record)?;
        if self.digest {
            println!("{}\t{}", print.hash, print.digest);
        } else {
            println!("{}", print.hash);
        }
        Ok(())
    }
}

/// A record piped with `echo` ends in a newline that is not part of it.
fn trim_newline(bytes: &[u8]) -> &[u8] {
    bytes.strip_suffix(b"\n").unwrap_or(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each name on the command line is the one `Profile::resolve` knows,
    /// so no choice clap offers is refused afterwards.
    #[test]
    fn every_profile_choice_resolves() {
        for choice in ProfileName::value_variants() {
            let spelled = choice.to_possible_value().expect("not skipped");
            assert_eq!(spelled.get_name(), choice.as_str());
            let fields = (*choice == ProfileName::Fields).then_some("amount:decimal");
            Profile::resolve(choice.as_str(), fields, None).expect("a known profile");
        }
    }
}

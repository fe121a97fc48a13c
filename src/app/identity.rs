//! Every stream's store identity, settled before the replica joins its
//! group (docs/design.md §8.2): adopted where the store holds it, written
//! at the stream's first start, and refused, naming the stream and
//! `idemgate rebuild`, where the store lost what the group's commits say
//! it held. What each finding means is `store::at_start`, pure; this is
//! the I/O around it.

use tracing::{info, warn};

use crate::config::Config;
use crate::ops::group::{self, GroupError};
use crate::store::{
    at_start, first_or_lost, AtStart, ClaimStore, Marked, Refusal, StoreError, StoreIdentity,
    StreamId,
};

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// `config_flag` names the file this replica read, so the command
    /// pastes as it is.
    #[error(
        "stream {stream}: {why}. Stop every replica and run `idemgate rebuild {config_flag} \
         --stream {stream}`, which writes the claims back from the clean topic, then start \
         again"
    )]
    Refused {
        stream: String,
        why: Refusal,
        config_flag: String,
    },
    #[error("stream {stream}: its store identity: {error}")]
    Store { stream: String, error: StoreError },
    #[error("stream {stream}: the group's committed offsets: {error}")]
    Group { stream: String, error: GroupError },
}

/// Adopts (or, at a first start, writes and adopts) each stream's
/// identity; from then on every round of `store` compares with it.
pub(crate) async fn establish(
    config: &Config,
    store: &dyn ClaimStore,
) -> Result<(), IdentityError> {
    for (index, stream) in config.streams.iter().enumerate() {
        let id = StreamId(index);
        let name = &stream.spec.name;
        let stored = |error| IdentityError::Store {
            stream: name.clone(),
            error,
        };
        let refused = |why| IdentityError::Refused {
            stream: name.clone(),
            why,
            config_flag: config.config_flag(),
        };
        let found = store.find_identity(id).await.map_err(stored)?;
        let identity = match at_start(&found) {
            AtStart::Adopt(identity) => identity,
            AtStart::Refuse(
                why @ (Refusal::Lost | Refusal::Differing { .. } | Refusal::WentBack),
            ) => return Err(refused(why)),
            judged @ (AtStart::FirstOrLost | AtStart::Refuse(Refusal::Partial { .. })) => {
                let commits = group_has_commits(config, index).await.map_err(|error| {
                    IdentityError::Group {
                        stream: name.clone(),
                        error,
                    }
                })?;
                first_or_lost(&judged, commits).map_err(refused)?;
                let written = store
                    .write_identity(id, StoreIdentity::random(), false)
                    .await
                    .map_err(stored)?;
                match at_start(&written) {
                    AtStart::Adopt(identity) => {
                        info!(stream = %name, %identity, "first start on this store: its store identity is written");
                        identity
                    }
                    AtStart::Refuse(why) => return Err(refused(why)),
                    AtStart::FirstOrLost => {
                        return Err(stored(StoreError::Protocol(
                            "the identity written is not there".into(),
                        )))
                    }
                }
            }
        };
        store.adopt_identity(id, identity);
        // A store that came back older keeps its identity: its progress
        // marks, against the highest every partition's commits recorded,
        // tell (docs/design.md §8.2). A replica does not start on it.
        // Where the commits cannot be read now (a coordinator moving),
        // the floors come from the first assignment, whose committed
        // offsets the replica waits for, and are checked before its first
        // round.
        match recorded_marks(config, index).await {
            Ok(recorded) => {
                store.raise_floors(id, &recorded);
                if store.check_marks(id).await.map_err(stored)? == Marked::Behind {
                    return Err(refused(Refusal::WentBack));
                }
            }
            Err(error) => {
                warn!(stream = %name, %error, "the group's commits could not be read at start: the store's progress marks are compared from the first assignment on");
            }
        }
    }
    Ok(())
}

/// The highest progress marks the group's commits of the stream recorded,
/// place by place, over every partition of its inputs: not only those
/// this replica will own, since another's commit may rely on claims the
/// store lost. A commit without idemgate's metadata (Kafka's own reset
/// tool) records none.
async fn recorded_marks(config: &Config, index: usize) -> Result<Vec<u64>, GroupError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        let consumer = group::client_reading_pending(&config)?;
        super::floors::recorded(&consumer, &config, index)
    })
    .await
    .map_err(GroupError::Task)?
}

/// Whether the group has idemgate's commits for the stream: what it
/// decided is in the clean topic, and its claims were in the store.
async fn group_has_commits(config: &Config, index: usize) -> Result<bool, GroupError> {
    let stream = &config.streams[index];
    let inputs = stream.inputs.clone();
    let key_id = stream.spec.key_id.clone();
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        let (consumer, _) = group::client(&config)?;
        let partitions = group::partitions(&consumer, &inputs)?;
        let committed = group::committed(&consumer, &partitions)?;
        Ok(group::has_idemgate_commits(&committed, &key_id))
    })
    .await
    .map_err(GroupError::Task)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_config_file_this_replica_read() {
        let text = include_str!("../../config/example.toml");
        let mut config = Config::parse_with_vars(text, |name| {
            (name == "IDEMGATE_KAFKA_BROKERS").then(|| "b:9092".to_string())
        })
        .unwrap();
        config.source = Some("/etc/idemgate/gate.toml".into());
        let refusal = IdentityError::Refused {
            stream: "bank".into(),
            why: Refusal::Lost,
            config_flag: config.config_flag(),
        }
        .to_string();
        assert!(
            refusal.contains("`idemgate rebuild --config /etc/idemgate/gate.toml --stream bank`"),
            "{refusal}"
        );
    }
}

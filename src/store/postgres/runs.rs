//! Records of finished runs on PostgreSQL (docs/design.md §7,
//! `store/runs.rs`): rows of `finished_runs` by their unique name, expired
//! on the caller's clock as claims are; the janitor deletes the expired.

use super::round::{boxed, pipeline, Step};
use super::{PostgresStore, Session};
use crate::clock::Millis;
use crate::store::{millis, spec, RunsName, StoreError};

impl PostgresStore {
    /// The name's five parameters, then `more`.
    fn runs_step(
        &self,
        sql: &str,
        name: &RunsName,
        more: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>,
    ) -> Result<Step, StoreError> {
        let key_id = spec(&self.streams, name.stream)?.key_id.clone();
        let sequence = i64::try_from(name.sequence)
            .map_err(|_| StoreError::Protocol("runs record sequence past i64".into()))?;
        let mut params = vec![
            boxed(key_id),
            boxed(name.topic.0 as i32),
            boxed(name.partition),
            boxed(i64::from(name.writer.0)),
            boxed(sequence),
        ];
        params.extend(more);
        Ok(Step::new(sql, params))
    }

    fn runs_expiry(&self, name: &RunsName, at: Millis) -> Result<i64, StoreError> {
        Ok(at.saturating_add(millis(spec(&self.streams, name.stream)?.watermark_ttl())))
    }

    pub(super) async fn put_runs_on(
        &self,
        session: &Session,
        name: &RunsName,
        content: &[u8],
        at: Millis,
    ) -> Result<(), StoreError> {
        let expires = self.runs_expiry(name, at)?;
        let more = vec![boxed(expires), boxed(content.to_vec())];
        let step = self.runs_step(&self.sql.put_runs, name, more)?;
        pipeline(session, &[step]).await?;
        Ok(())
    }

    pub(super) async fn get_runs_on(
        &self,
        session: &Session,
        name: &RunsName,
        at: Millis,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let step = self.runs_step(&self.sql.get_runs, name, vec![boxed(at)])?;
        let rows = pipeline(session, &[step]).await?;
        rows.into_iter()
            .next()
            .and_then(|rows| rows.into_iter().next())
            .map(|row| row.try_get::<_, Vec<u8>>(0))
            .transpose()
            .map_err(|e| super::connect::store_error("runs record read", e))
    }

    pub(super) async fn refresh_runs_on(
        &self,
        session: &Session,
        name: &RunsName,
        at: Millis,
    ) -> Result<bool, StoreError> {
        let expires = self.runs_expiry(name, at)?;
        let step = self.runs_step(
            &self.sql.refresh_runs,
            name,
            vec![boxed(at), boxed(expires)],
        )?;
        let rows = pipeline(session, &[step]).await?;
        Ok(rows.first().is_some_and(|rows| !rows.is_empty()))
    }

    pub(super) async fn delete_runs_on(
        &self,
        session: &Session,
        names: &[RunsName],
    ) -> Result<(), StoreError> {
        let steps = names
            .iter()
            .map(|name| self.runs_step(&self.sql.delete_runs, name, Vec::new()))
            .collect::<Result<Vec<_>, _>>()?;
        pipeline(session, &steps).await?;
        Ok(())
    }
}

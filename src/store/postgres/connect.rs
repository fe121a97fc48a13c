//! Reaching PostgreSQL: the pool of connections, TLS through rustls on
//! ring as the URL's `sslmode` asks (see `options.rs`), and what a failure
//! means to the breaker and the operator.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::options::{redact, split_sslmode, SslMode};
use super::PostgresOptions;
use crate::store::redis::TlsFiles;
use crate::store::{Rejection, RejectionCause, StoreError};

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a round waits for a free connection of the pool.
const WAIT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a single statement runs on the server before it is
/// cancelled there (and the round fails as unavailable).
pub(super) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The pool, and who the store connects as (for the SQL an operator runs
/// where the role may not create the tables).
pub(super) struct Connected {
    pub(super) pool: Pool,
    pub(super) user: String,
}

pub(super) fn pool(options: &PostgresOptions) -> Result<Connected, StoreError> {
    let (url, mode) = split_sslmode(&options.url)?;
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::Refused(format!("store.url {}: {e}", redact(&options.url))))?;
    if let Some(password) = &options.password {
        config.password(password);
    }
    config.connect_timeout(CONNECT_TIMEOUT);
    config.application_name("idemgate");
    config.options(format!(
        "-c statement_timeout={}",
        STATEMENT_TIMEOUT.as_millis()
    ));
    config.ssl_mode(match mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    let user = config.get_user().unwrap_or("idemgate").to_string();
    let tls = MakeRustlsConnect::new(tls_config(mode, options.tls.as_ref())?);
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(options.pool_size.max(1))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(WAIT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| StoreError::Refused(format!("postgres pool: {e}")))?;
    Ok(Connected { pool, user })
}

/// One connection of the pool.
pub(super) async fn client(pool: &Pool) -> Result<deadpool_postgres::Object, StoreError> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(e) => store_error("connect", e),
        other => StoreError::Unavailable(format!("postgres: {other}")),
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration a mode asks for (see `SslMode`).
fn tls_config(mode: SslMode, files: Option<&TlsFiles>) -> Result<ClientConfig, StoreError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Refused(format!("tls: {e}")))?;
    let ca_file = files.and_then(|f| f.ca_file.as_deref());
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::Disable | SslMode::Prefer => Arc::new(Unverified(provider)),
        SslMode::Require if ca_file.is_none() => Arc::new(Unverified(provider)),
        SslMode::Require | SslMode::VerifyCa => Arc::new(AnyName(webpki(ca_file, &provider)?)),
        SslMode::VerifyFull => webpki(ca_file, &provider)?,
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let client_cert = files.and_then(|f| Some((f.cert_file.as_deref()?, f.key_file.as_deref()?)));
    match client_cert {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| tls_file(cert, e))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_file(key, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| StoreError::Refused(format!("tls client certificate: {e}")))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

fn tls_file(path: &std::path::Path, error: impl std::fmt::Display) -> StoreError {
    StoreError::Refused(format!("tls file {}: {error}", path.display()))
}

/// Chain and host name checked against the CA file, or the system's roots.
fn webpki(
    ca_file: Option<&std::path::Path>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, StoreError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| tls_file(path, e))? {
                let cert = cert.map_err(|e| tls_file(path, e))?;
                roots.add(cert).map_err(|e| tls_file(path, e))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        return Err(StoreError::Refused(
            "tls: no CA to verify the server against (set store.tls.ca_file)".into(),
        ));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| StoreError::Refused(format!("tls: {e}")))
}

/// `prefer` and `require` without a CA: the session is encrypted, the
/// server's certificate is taken as it comes; its handshake signature is
/// still checked.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must reach a trusted root; the name it carries
/// is not compared with the host.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// What a failed statement means: the server's refusals that last until
/// an operator acts are rejections with their cause; an outage, a
/// cancelled statement, a conflict between transactions are unavailable
/// (the breaker counts them, the round is sent again); anything else is a
/// protocol error.
pub(super) fn store_error(what: &str, error: tokio_postgres::Error) -> StoreError {
    let Some(db) = error.as_db_error() else {
        return StoreError::Unavailable(format!("postgres {what}: {error}"));
    };
    let code = db.code();
    let detail = format!("{what}: {} ({})", db.message(), code.code());
    let cause = if *code == SqlState::INSUFFICIENT_PRIVILEGE
        || *code == SqlState::INVALID_PASSWORD
        || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    {
        Some(RejectionCause::NoPerm)
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        Some(RejectionCause::ReadOnly)
    } else if *code == SqlState::DISK_FULL {
        Some(RejectionCause::DiskFull)
    } else if *code == SqlState::OUT_OF_MEMORY {
        Some(RejectionCause::Oom)
    } else if *code == SqlState::UNDEFINED_TABLE
        || *code == SqlState::UNDEFINED_COLUMN
        || *code == SqlState::WRONG_OBJECT_TYPE
        || *code == SqlState::DATATYPE_MISMATCH
    {
        Some(RejectionCause::WrongType)
    } else {
        None
    };
    if let Some(cause) = cause {
        return StoreError::Rejected(Rejection { cause, detail });
    }
    let class = &code.code()[..2];
    // 08 connection, 40 transaction rollback (serialization, deadlock),
    // 53 resources (too many connections), 57 operator intervention
    // (shutdown, cancelled statement).
    if ["08", "40", "53", "57"].contains(&class) {
        StoreError::Unavailable(format!("postgres {detail}"))
    } else {
        StoreError::Protocol(format!("postgres {detail}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_builds_a_tls_configuration_without_files() {
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            assert!(tls_config(mode, None).is_ok(), "{mode:?}");
        }
        let missing = TlsFiles {
            ca_file: Some("/nonexistent/ca.pem".into()),
            cert_file: None,
            key_file: None,
        };
        let error = tls_config(SslMode::VerifyFull, Some(&missing)).unwrap_err();
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}

//! librdkafka's own log lines and error callbacks, rate-limited. During a
//! broker outage librdkafka reports every failed connection attempt, to
//! every broker, from every client: hundreds of lines a minute that say one
//! thing. Each (facility, level) gets one line per period here, with how
//! many were held back; the first one always gets through.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use tracing::{debug, error, info, warn};

use crate::logging::RateLimit;

/// One line per facility and level this often.
const PERIOD: Duration = Duration::from_secs(30);

/// The rate limits of one client (each client's context embeds one).
#[derive(Default)]
pub(crate) struct ClientLogs {
    limits: Mutex<HashMap<(String, i32), std::sync::Arc<RateLimit>>>,
}

impl ClientLogs {
    fn limit(&self, key: (String, i32)) -> std::sync::Arc<RateLimit> {
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        limits
            .entry(key)
            .or_insert_with(|| std::sync::Arc::new(RateLimit::new(PERIOD)))
            .clone()
    }

    pub(crate) fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let Some(held) = self.limit((facility.to_string(), level as i32)).allow() else {
            return;
        };
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                error!(target: "librdkafka", facility, held_back = held, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                warn!(target: "librdkafka", facility, held_back = held, "{message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                info!(target: "librdkafka", facility, held_back = held, "{message}")
            }
            RDKafkaLogLevel::Debug => {
                debug!(target: "librdkafka", facility, held_back = held, "{message}")
            }
        }
    }

    pub(crate) fn error(&self, error: &KafkaError, reason: &str) {
        let code = format!("{:?}", error.rdkafka_error_code());
        if let Some(held) = self.limit((code, -1)).allow() {
            error!(target: "librdkafka", %error, held_back = held, "{reason}");
        }
    }
}
